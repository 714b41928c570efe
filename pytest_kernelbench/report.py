"""Where results go: a JSONL line per finished item (appended and flushed at once, so a killed
run keeps what it finished), the JSON report at the end, and the terminal table."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from . import metrics
from .protocol import atomic_write

SCHEMA_VERSION = 2   # schemas/report.schema.json


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
    seen: dict[tuple, dict] = {}
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
    atomic_write(path, json.dumps(doc, indent=1, default=str))
    return doc


def _fmt(x: object, pattern: str = "{:.2f}", none: str = "-") -> str:
    return none if x is None else pattern.format(x)


def _speed_cell(i: dict) -> str:
    if i.get("score") is not None:
        band = i.get("band")
        return f"{i['score']:.2f}x" + (f" [{band[0]:.2f}-{band[1]:.2f}]" if band else "")
    if i.get("speed") and i.get("outcome") == "passed":
        return i["speed"]                       # "cpu: not a speed"
    return "-"


def _note(i: dict, width: int = 90) -> str:
    """Why an item did not pass (first line of its message), or why it was skipped."""
    if i.get("outcome") == "passed":
        if i.get("suspect"):
            return "suspect: faster than the roofline allows"
        # latency/bandwidth problems: their own figure at the last size (GPU runs; CPU times are no speed)
        m = next((s["metric"] for s in reversed(i.get("sizes") or []) if s.get("metric")), None)
        if m and i.get("device") == "cuda":
            return f"{m['name']} {m['candidate']:.3g} {m['unit']} (reference {m['reference']:.3g})"
        return ""
    text = (i.get("message") or "").strip().splitlines()
    text = text[0] if text else ""
    return text if len(text) <= width else text[:width - 3] + "..."


def natural_key(text: str) -> tuple:
    """Numbers inside ids compare as numbers: pkb/2_allgather before pkb/10_embedding_lookup."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def table(items: list[dict]) -> list[str]:
    rows: list[tuple[str, ...]] = [("problem", "W", "dev", "candidate", "outcome", "speedup [noise band]", "verdict", "roof%", "wall s", "note")]
    for i in sorted(latest_by_item(items), key=lambda i: (natural_key(i.get("problem") or ""), i.get("sample") or 0)):
        outcome = i["outcome"] if i["outcome"] not in ("failed", "error") else f"{i['outcome']}:{i.get('failure')}"
        roof = (i.get("roofline") or {}).get("candidate")
        name = str(i.get("problem") or i.get("nodeid"))
        if i.get("sample") is not None:
            name += f" #{i['sample']}"
        rows.append((name, str(i.get("world_size") or "-"), str(i.get("device") or "-"),
                     str((i.get("candidate") or {}).get("label", "-")), outcome + (" (suspect)" if i.get("suspect") else ""),
                     _speed_cell(i), str(i.get("verdict") or "-"),
                     _fmt(roof * 100 if roof is not None else None, "{:.0f}%"), _fmt(i.get("wall_s"), "{:.1f}"),
                     _note(i)))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]


def summary_lines(doc: dict) -> list[str]:
    a = doc["aggregates"]
    counted = f"{a['passed']}/{a['total']}"
    extra = [f"{a['failed']} failed"] + ([f"{a['errors']} errors"] if a.get("errors") else [])
    extra.append(f"{a['skipped']} skipped, not counted")
    lines = [f"pass rate {_fmt(a['pass_rate'], '{:.1%}')} ({counted}; {', '.join(extra)})"]
    if not a["total"]:
        lines = [f"no item ran: {a['skipped']} skipped (reasons below)"]
    elif a.get("gm_speedup") is not None:
        lines.append(f"GM-speedup {a['gm_speedup']:.3f}x   Pass x GM {_fmt(a['pass_x_gm'], '{:.3f}')}   "
                     f"PASS+Good {_fmt(a['pass_good'], '{:.1%}')}   fast_1 {_fmt(a['fast_p'].get('1.0'), '{:.1%}')}")
    elif any(i.get("device") == "cpu" for i in doc["items"]):
        lines.append("speed: none (cpu: not a speed; gloo timings exercise the timing protocol only, so no "
                     "speedup, verdict, GM-speedup, Pass x GM, PASS+Good or fast_p)")
    else:
        lines.append("speed: not measured (--kb-timing=off)")
    from .usage import summary_line
    cost = summary_line(a.get("cost"))
    if cost:
        lines.append(cost)
    if a.get("roofline_gm") is not None:
        lines.append(f"roofline (GM over passed items) {a['roofline_gm']:.1%}; suspect items: {a['suspect']}")
    if a.get("failures"):
        lines.append("failures: " + ", ".join(f"{k} {v}" for k, v in sorted(a["failures"].items())))
    if a.get("skip_reasons"):
        lines.append("skipped: " + "; ".join(f"{v} x {k}" for k, v in sorted(a["skip_reasons"].items())))
    if a.get("samples"):
        lines.append("samples: " + ", ".join(f"{k} {v:.3f}" for k, v in a["samples"].items()))
    for key, groups in doc["breakdowns"].items():
        if groups:
            parts = [f"{tag} {g['passed']}/{g['total']}" + (f" {g['gm_speedup']:.2f}x" if g.get("gm_speedup") else "")
                     for tag, g in groups.items() if g["total"]]
            if parts:
                lines.append(f"by {key}: " + ", ".join(parts))
    return lines
