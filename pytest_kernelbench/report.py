"""Where results go: a JSONL line per finished item (appended and flushed at once, so a killed
run keeps what it finished), the JSON report at the end, and the terminal table."""
from __future__ import annotations

import json
import os
from pathlib import Path

from . import metrics

SCHEMA_VERSION = 1


class JsonlLog:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: dict):
        line = json.dumps(record, default=str)
        with open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_jsonl(path: Path) -> list[dict]:
    """Items of a (possibly cut-short) JSONL; a torn last line is ignored."""
    items = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    items.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return items


def latest_by_item(items: list[dict]) -> list[dict]:
    """One record per (nodeid, sample): the last one written wins, except that a refinement
    round marked best (model candidates: every round is a record, "best" marks the sample's
    result) is not displaced by the item's other rounds."""
    seen = {}
    for i in items:
        key = (i.get("nodeid"), i.get("sample"))
        prev = seen.get(key)
        if prev is not None and prev.get("best") and i.get("best") is False:
            continue
        seen[key] = i
    return list(seen.values())


def write_json(path: Path, machine: dict, config: dict, items: list[dict]):
    items = latest_by_item(items)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "machine": machine,
        "config": config,
        "items": items,
        "aggregates": metrics.aggregate(items),
        "breakdowns": metrics.breakdowns(items),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, path)
    return doc


def _fmt(x, pattern="{:.2f}", none="-"):
    return none if x is None else pattern.format(x)


def table(items: list[dict]) -> list[str]:
    rows = [("problem", "W", "dev", "candidate", "outcome", "speedup", "verdict", "roof%", "wall s")]
    for i in sorted(latest_by_item(items), key=lambda i: (i.get("problem") or "", i.get("sample") or 0)):
        outcome = i["outcome"] if i["outcome"] != "failed" else f"failed:{i.get('failure')}"
        roof = (i.get("roofline") or {}).get("candidate")
        name = i.get("problem") or i.get("nodeid")
        if i.get("sample") is not None:
            name += f" #{i['sample']}"
        rows.append((name, str(i.get("world_size") or "-"), i.get("device") or "-",
                     (i.get("candidate") or {}).get("label", "-"), outcome + (" (suspect)" if i.get("suspect") else ""),
                     _fmt(i.get("score"), "{:.2f}x"), i.get("verdict") or "-",
                     _fmt(roof * 100 if roof is not None else None, "{:.0f}%"), _fmt(i.get("wall_s"), "{:.1f}")))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


def summary_lines(doc: dict) -> list[str]:
    a = doc["aggregates"]
    lines = [f"pass rate {_fmt(a['pass_rate'], '{:.1%}')} ({a['passed']}/{a['total']}, {a['skipped']} skipped)   "
             f"GM-speedup {_fmt(a['gm_speedup'], '{:.3f}x')}   Pass x GM {_fmt(a['pass_x_gm'], '{:.3f}')}   "
             f"PASS+Good {_fmt(a['pass_good'], '{:.1%}')}   fast_1 {_fmt(a['fast_p'].get('1.0'), '{:.1%}')}"]
    if a.get("errors"):
        lines.append(f"API errors (not counted as failures): {a['errors']}")
    from .usage import summary_line
    cost = summary_line(a.get("cost"))
    if cost:
        lines.append(cost)
    if any(i.get("device") == "cpu" for i in doc["items"]):
        lines.append("note: CPU (gloo) timings exercise the timing protocol only; they are not GPU speed")
    if a.get("roofline_gm") is not None:
        lines.append(f"roofline (GM over passed items) {a['roofline_gm']:.1%}; suspect items: {a['suspect']}")
    if a.get("failures"):
        lines.append("failures: " + ", ".join(f"{k} {v}" for k, v in sorted(a["failures"].items())))
    if a.get("samples"):
        lines.append("samples: " + ", ".join(f"{k} {v:.3f}" for k, v in a["samples"].items()))
    for key, groups in doc["breakdowns"].items():
        if groups:
            parts = [f"{tag} {g['passed']}/{g['total']}" + (f" {g['gm_speedup']:.2f}x" if g.get("gm_speedup") else "")
                     for tag, g in groups.items() if g["total"]]
            if parts:
                lines.append(f"by {key}: " + ", ".join(parts))
    return lines
