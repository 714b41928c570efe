"""Looser stopping rules for the adaptive rounds, replayed on recorded self-checks (issue 21).

    python bench/stopping_rules_replay.py [REPORT.json ...]     (default: every 18-item self-check
                                                                 under reports/baselines dated 2026-11-27)

For each rule, each size's recorded rounds are cut where the rule would have stopped (a rule can
only stop earlier than the rounds recorded), the rounds cut come off the item's cost at that
size's own cost a round (its harness time a round, outside the timed work), and the size's speedup
is the median of the rounds kept (bench/selfcheck_summary.py's replay, with these rules). Prints, per rule: the median over reports of the median cost per
item, the reports at or below 3 s, and the share of sizes of at least 1 MiB (scored items) within
1.00 +- 0.03. A benchmark's table, not a test.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from selfcheck_summary import REPO, summary  # noqa: E402

# (label, least rounds, band target for sizes >= 1 MiB, band target below, most rounds)
RULES = (("as run (+-3 %, 12-64 rounds)", 12, 0.03, 0.03, 64), ("band +-4 %", 12, 0.04, 0.04, 64),
         ("band +-5 %", 12, 0.05, 0.05, 64), ("at most 40 rounds", 12, 0.03, 0.03, 40),
         ("at most 32 rounds", 12, 0.03, 0.03, 32), ("+-5 % below 1 MiB only", 12, 0.03, 0.05, 64))


def main(paths: list[str]) -> None:
    if not paths:
        paths = [str(p) for p in sorted((REPO / "reports" / "baselines").glob("2026-11-27-*.json"))]
    docs = []
    for p in paths:
        doc = json.loads(Path(p).read_text())
        if isinstance(doc, dict) and len(doc.get("items") or []) == 18:
            docs.append(doc)
    print(f"{len(docs)} self-checks\n")
    print("| rule | median cost per item s (median over reports) | reports at or below 3 s | sizes >= 1 MiB within +-0.03 |")
    print("|---|---|---|---|")
    for label, least, big, small, most in RULES:
        rows = [summary(d, least, big, small, most) for d in docs]
        w, n = sum(r["within_counts"][0] for r in rows), sum(r["within_counts"][1] for r in rows)
        print(f"| {label} | {statistics.median(r['cost'] for r in rows):.2f} | {sum(r['cost'] <= 3 for r in rows)} of "
              f"{len(rows)} | {100 * w / max(n, 1):.1f} % |")


if __name__ == "__main__":
    main(sys.argv[1:])
