"""The table of bench/gpu_shared.sh: problem x W x {self-check, shipped}, each cell the item's
outcome (failed/error with its category) or why it skipped, from the runs' reports (the JSONL of a
run cut short). A shared GPU's run has no speed: no speed column.

    python bench/shared_table.py OUT/shared-w2-reference.json OUT/shared-w2-shipped.jsonl ...
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from pytest_kernelbench import report  # noqa: E402
from pytest_kernelbench.report import reading  # noqa: E402

NAME = re.compile(r"shared-w(\d+)-(\w+)\.jsonl?$")
MODES = {"reference": "self-check", "shipped": "shipped"}


def cell(rec: dict) -> str:
    out = rec.get("outcome") or "?"
    if out in ("failed", "error"):
        return f"{out}:{rec.get('failure')}"
    if out == "skipped":
        why = (rec.get("message") or "").splitlines()[0] if rec.get("message") else ""
        return "skip: " + (why[:70] + "..." if len(why) > 73 else why)
    return out + ("" if rec.get("placement") == "shared" or rec.get("device") != "cuda" else " (not shared)")


def main(paths: list[str]) -> None:
    runs: dict[tuple[int, str], dict[str, dict]] = {}
    for p in paths:
        m = NAME.search(p)
        if not m or (p.endswith(".jsonl") and Path(p[:-1]).exists()):      # the JSON when both are there
            continue
        try:
            doc = reading.load(p)
        except reading.ReportError as e:
            print(f"<!-- {e} -->")
            continue
        runs[(int(m.group(1)), MODES.get(m.group(2), m.group(2)))] = {r["problem"]: r for r in reading.items(doc)}
    cols = sorted(runs)
    problems = sorted({pid for recs in runs.values() for pid in recs}, key=report.natural_key)
    print("| problem | " + " | ".join(f"W={w} {mode}" for w, mode in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for pid in problems:
        print(f"| {pid} | " + " | ".join(cell(runs[c][pid]) if pid in runs[c] else "not run" for c in cols) + " |")
    for c in cols:
        recs = runs[c].values()
        count = {k: sum(1 for r in recs if r.get("outcome") == k) for k in ("passed", "failed", "error", "skipped")}
        print(f"\nW={c[0]} {c[1]}: " + ", ".join(f"{v} {k}" for k, v in count.items()), end="")
    print()


if __name__ == "__main__":
    main(sys.argv[1:])
