"""Where results go: a JSONL line per finished item (appended and flushed at once, so a killed
run keeps what it finished), the JSON report at the end, and the terminal table."""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

from .. import metrics
from ..protocol import SHARED_NO_SPEED, SOLUTIONS_ONLY_SKIP, Outcome, atomic_write

SCHEMA_VERSION = 2   # schemas/report.schema.json


def key_path(run_id: str) -> Path:
    """Where the controller keeps a run's report key: the user's cache, out of every candidate
    process's sandbox, never in the project or the run folder."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pytest-kernelbench" / "report-keys" / run_id


def report_key(run_id: str, create: bool = False) -> str | None:
    """The key the JSONL lines of a run are signed with (made by the controller of the run)."""
    path = key_path(run_id)
    try:
        return path.read_text().strip() or None
    except OSError:
        if not create:
            return None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    return key


def _mac(key: str, record: dict) -> str:
    body = json.dumps({k: v for k, v in record.items() if k != "mac"}, sort_keys=True, default=str)
    return hmac.new(key.encode(), body.encode(), hashlib.sha256).hexdigest()


class JsonlLog:
    """The run's JSONL, written by the controller only; each line carries an HMAC under the run's
    report key, which no rank ever holds, so a line a candidate forged or tore is refused on resume."""

    def __init__(self, path: Path, key: str | None = None):
        self.path = Path(path)
        self.key = key
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: dict):
        record = json.loads(json.dumps(record, default=str))
        if self.key:
            record["mac"] = _mac(self.key, record)
        line = json.dumps(record)
        with open(self.path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_signed(path: Path, key_of: Callable[[str], str | None]) -> tuple[list[dict], int, set[str]]:
    """(the lines of a JSONL that carry the HMAC of the run named in them, how many lines were
    refused: torn, unsigned or forged, the run ids whose key was not found). The key is looked up
    by the line's run_id, so a report renamed with --kb-report still resumes."""
    items, refused, keyless = [], 0, set()
    keys: dict[str, str | None] = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    refused += 1
                    continue
                run_id = rec.get("run_id") if isinstance(rec, dict) else None
                key = None
                if isinstance(run_id, str) and run_id and "/" not in run_id and not run_id.startswith("."):
                    if run_id not in keys:
                        keys[run_id] = key_of(run_id)
                    key = keys[run_id]
                    if key is None:
                        keyless.add(run_id)
                if key and isinstance(rec.get("mac"), str) and hmac.compare_digest(rec["mac"], _mac(key, rec)):
                    items.append(rec)
                else:
                    refused += 1
    except OSError:
        pass
    return items, refused, keyless


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


def write_json(path: Path, machine: dict, config: dict, items: list[dict], interrupted: dict | None = None):
    """`interrupted`: the run stopped before every selected item ran ({"reason", "left", "resume"});
    such a report is marked, so that nobody reads it as a whole run."""
    items = latest_by_item(items)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "machine": machine,
        "config": config,
        "items": items,
        "aggregates": metrics.aggregate(items),
        "breakdowns": metrics.breakdowns(items),
    }
    if interrupted:
        doc["interrupted"] = interrupted
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
    if i.get("speed") and i.get("outcome") == Outcome.PASSED:
        return i["speed"]                       # "cpu: not a speed"
    return "-"


def _note(i: dict, width: int = 90) -> str:
    """Why an item did not pass (first line of its message), or why it was skipped."""
    if i.get("outcome") == Outcome.PASSED:
        if i.get("suspect"):
            return "suspect: faster than the roofline allows"
        # latency/bandwidth problems: their own figure at the last size (GPU runs; CPU times are no speed)
        m = next((s["metric"] for s in reversed(i.get("sizes") or []) if s.get("metric")), None)
        unscored = "unscored (not in the speed aggregates)" if i.get("unscored") else ""
        if m and i.get("device") == "cuda":
            return "; ".join(filter(None, [f"{m['name']} {m['candidate']:.3g} {m['unit']} "
                                           f"(reference {m['reference']:.3g})", unscored]))
        return unscored
    text = (i.get("message") or "").strip().splitlines()
    text = text[0] if text else ""
    return text if len(text) <= width else text[:width - 3] + "..."


def natural_key(text: str) -> tuple:
    """Numbers inside ids compare as numbers: pkb/2_allgather before pkb/10_embedding_lookup."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def table(items: list[dict]) -> list[str]:
    """One row per item; the problems --kb-solutions-only left out are one line after it (a folder
    of two kernels is a table of two rows, not of every problem in the suite)."""
    items = latest_by_item(items)
    left_out = sum(1 for i in items if i.get("outcome") == Outcome.SKIPPED and i.get("message") == SOLUTIONS_ONLY_SKIP)
    items = [i for i in items if not (i.get("outcome") == Outcome.SKIPPED and i.get("message") == SOLUTIONS_ONLY_SKIP)]
    rows: list[tuple[str, ...]] = [("problem", "W", "dev", "candidate", "outcome", "speedup [noise band]", "verdict", "roof%", "wall s", "note")]
    for i in sorted(items, key=lambda i: (natural_key(i.get("problem") or ""), i.get("sample") or 0)):
        outcome = i["outcome"] if i["outcome"] not in (Outcome.FAILED, Outcome.ERROR) else f"{i['outcome']}:{i.get('failure')}"
        roof = (i.get("roofline") or {}).get("candidate")
        name = str(i.get("problem") or i.get("nodeid"))
        if i.get("sample") is not None:
            name += f" #{i['sample']}"
        dev = str(i.get("device") or "-") + (" (shared)" if metrics.is_shared(i) else "")
        rows.append((name, str(i.get("world_size") or "-"), dev,
                     str((i.get("candidate") or {}).get("label", "-")), outcome + (" (suspect)" if i.get("suspect") else ""),
                     _speed_cell(i), str(i.get("verdict") or "-"),
                     _fmt(roof * 100 if roof is not None else None, "{:.0f}%"), _fmt(i.get("wall_s"), "{:.1f}"),
                     _note(i)))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    if left_out:
        out.append(f"(and {left_out} problem(s) without a file in --kb-solutions, skipped: --kb-solutions-only)")
    return out


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def skip_line(reasons: dict[str, int], most: int = 4, width: int = 100) -> str:
    """The skip reasons, most frequent first, each cut to its first line and `width` characters;
    past `most` reasons, how many more (the report has every item's reason)."""
    ranked = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    parts = []
    for reason, n in ranked[:most]:
        text = (reason.strip().splitlines() or [""])[0]
        parts.append(f"{n} x " + (text if len(text) <= width else text[:width - 3] + "..."))
    rest = ranked[most:]
    if rest:
        parts.append(f"{sum(n for _, n in rest)} x {len(rest)} other reason(s), in the report")
    return "skipped: " + "; ".join(parts)


def summary_lines(doc: dict) -> list[str]:
    a = doc["aggregates"]
    counted = f"{a['passed']}/{a['total']}"
    # errors (retryable: not the candidate's) are counted apart like skips, never as a non-pass
    extra = [f"{a['failed']} failed"] + ([_plural(a["errors"], Outcome.ERROR.value) + " (retryable)"] if a.get("errors") else [])
    extra.append(f"{a['skipped']} skipped, not counted")
    lines = [f"pass rate {_fmt(a['pass_rate'], '{:.1%}')} ({counted}; {', '.join(extra)})"]
    if not a["total"]:
        lines = [f"no item ran: {a['skipped']} skipped (reasons below)" if a["skipped"] else "no item finished"]
        if a.get("errors"):
            lines = [f"no verdict: {_plural(a['errors'], Outcome.ERROR)} (retryable: not the candidates' doing), "
                     f"{a['skipped']} skipped"]
    elif a.get("gm_speedup") is not None:
        lines.append(f"GM-speedup {a['gm_speedup']:.3f}x   Pass x GM {_fmt(a['pass_x_gm'], '{:.3f}')}   "
                     f"fast_1 {_fmt(a['fast_p'].get('1.0'), '{:.1%}')}   PASS+Good {_fmt(a['pass_good'], '{:.1%}')}")
        fam = a.get("family_weighted") or {}
        if fam.get("families", a["total"]) < a["total"] and fam.get("pass_x_gm") is not None:
            lines.append(f"each family of variants weighing as one problem ({fam['families']} families): pass rate "
                         f"{fam['pass_rate']:.1%}, GM-speedup {fam['gm_speedup']:.3f}x, Pass x GM {fam['pass_x_gm']:.3f}")
    elif a.get("shared") and not any(i.get("device") == "cpu" for i in doc["items"]):
        lines.append(f"speed: none ({SHARED_NO_SPEED}: the ranks shared GPUs, --kb-oversubscribe; no speedup, "
                     "verdict, GM-speedup, Pass x GM, PASS+Good, fast_p or roofline)")
    elif any(i.get("device") == "cpu" for i in doc["items"]):
        lines.append("speed: none (cpu: not a speed; gloo timings exercise the timing protocol only, so no "
                     "speedup, verdict, GM-speedup, Pass x GM, PASS+Good or fast_p)")
    elif ((doc.get("config") or {}).get("settings") or {}).get("timing") is False:
        lines.append("speed: not measured (--kb-timing=off)")
    elif not a["passed"]:
        lines.append("speed: none (no item passed, so no speedup was measured)")
    else:
        lines.append("speed: none (no passed item was timed)")
    from ..metrics.usage import summary_line
    cost = summary_line(a.get("cost"))
    if cost:
        lines.append(cost)
    if a.get("roofline_gm") is not None:
        lines.append(f"roofline (GM over passed items) {a['roofline_gm']:.1%}; suspect items: {a['suspect']}")
    if a.get("shared") and a.get("gm_speedup") is not None:
        lines.append(f"shared GPU: {a['shared']} item(s) ran with their ranks sharing GPUs (--kb-oversubscribe): in "
                     "the pass rate, outside every speed figure above")
    if a.get("unscored"):
        lines.append(f"unscored: {a['unscored']} item(s) of problems that report latency or bandwidth only "
                     "(in the pass rate, outside every speed aggregate)")
    if a.get("reference_copies"):
        lines.append(f"reference copies: {a['reference_copies']} (counted, never passed): candidates that "
                     "hand back the problem's reference")
    if a.get("failures"):
        lines.append("failures: " + ", ".join(f"{k} {v}" for k, v in sorted(a["failures"].items())))
    if a.get("skip_reasons"):
        lines.append(skip_line(a["skip_reasons"]))
    if a.get("samples"):
        lines.append("samples: " + ", ".join(f"{k} {v:.3f}" for k, v in a["samples"].items()))
    for key, groups in doc["breakdowns"].items():
        if groups:
            parts = [f"{tag} {g['passed']}/{g['total']}" + (f" {g['gm_speedup']:.2f}x" if g.get("gm_speedup") else "")
                     for tag, g in groups.items() if g["total"]]
            if parts:
                lines.append(f"by {key}: " + ", ".join(parts))
    return lines
