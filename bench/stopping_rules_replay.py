"""Other stopping rules for the adaptive rounds, replayed on recorded self-checks (issue 21).

    python bench/stopping_rules_replay.py [--each] [REPORT.json ...]   (default: every 18-item
                        self-check under reports/baselines dated 2026-11-27 recorded with the plain band)

For each rule, each size's recorded rounds are cut where the rule would have stopped. A rule can
only stop earlier than the rounds recorded, so only reports recorded with the plain order
statistics' band are replayed (the last row's interpolated band is the harness's since). The rounds
cut come off the item's cost at that size's own cost a round (its harness time a round, outside
the timed work), and the size's speedup is the median of the rounds kept (bench/selfcheck_summary.py's
replay, with these rules). Prints, per rule: the median over reports of the median cost per item,
the reports at or below 3 s, and the share of sizes of at least 1 MiB (scored items) within
1.00 +- 0.03; with --each, a line per report. A benchmark's table, not a test.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from selfcheck_summary import REPO, plain_within, summary  # noqa: E402

from pytest_kernelbench.rank.stats import band_within  # noqa: E402

# (label, least rounds, band target for sizes >= 1 MiB, band target below, most rounds, the band's test:
# the plain order statistics, as the recorded runs used, or the interpolated ones, as now; then the
# first rounds left out of the band, run as a warm-up)
RULES = (("plain order statistics (+-3 %, 12-64 rounds)", 12, 0.03, 0.03, 64, plain_within),
         ("band +-4 %", 12, 0.04, 0.04, 64, plain_within), ("band +-5 %", 12, 0.05, 0.05, 64, plain_within),
         ("at most 40 rounds", 12, 0.03, 0.03, 40, plain_within), ("at most 32 rounds", 12, 0.03, 0.03, 32, plain_within),
         ("+-5 % below 1 MiB only", 12, 0.03, 0.05, 64, plain_within),
         ("interpolated order statistics (+-3 %, 12-64 rounds)", 12, 0.03, 0.03, 64, band_within),
         # a size's first round is slow on both sides (new slots, the windows' first outputs of
         # that many calls): its ratio reads 0.93 at the median, against 1.00 for the rest
         ("interpolated, the first round a warm-up", 12, 0.03, 0.03, 64, band_within, 1))

INTERPOLATED = next(rule for rule in RULES if rule[0].startswith("interpolated order statistics"))


def interpolated(doc: dict) -> bool:
    """Recorded with the interpolated band (its sizes say so): rounds stopped earlier than the plain
    band's rule would have, so no replay of that rule can be made on them."""
    return any((s.get("timing") or {}).get("band_method") for i in doc["items"] for s in i.get("sizes") or [])


def main(paths: list[str]) -> None:
    each = "--each" in paths         # also one line per report: the plain band's rule and the interpolated one's
    paths = [p for p in paths if p != "--each"]
    if not paths:
        paths = [str(p) for p in sorted((REPO / "reports" / "baselines").glob("2026-11-27-*.json"))]
    docs, names = [], []
    for p in paths:
        doc = json.loads(Path(p).read_text())
        if isinstance(doc, dict) and len(doc.get("items") or []) == 18 and not interpolated(doc):
            docs.append(doc)
            names.append(Path(p).name)
    print(f"{len(docs)} self-checks\n")
    print("| rule | median cost per item s (median over reports) | reports at or below 3 s | sizes >= 1 MiB within +-0.03 |")
    print("|---|---|---|---|")
    for label, least, big, small, most, test, *skip in RULES:
        rows = [summary(d, least, big, small, most, band_test=test, skip=sum(skip)) for d in docs]
        w, n = sum(r["within_counts"][0] for r in rows), sum(r["within_counts"][1] for r in rows)
        print(f"| {label} | {statistics.median(r['cost'] for r in rows):.2f} | {sum(r['cost'] <= 3 for r in rows)} of "
              f"{len(rows)} | {100 * w / max(n, 1):.1f} % |")

    if each:
        print("\n| report | as run: cost s, within | plain band replayed | interpolated band replayed |")
        print("|---|---|---|---|")
        for name, doc in zip(names, docs):
            cells = [summary(doc)] + [summary(doc, *rule[1:5], band_test=rule[5]) for rule in (RULES[0], INTERPOLATED)]
            print(f"| {name} | " + " | ".join(f"{c['cost']:.2f}, {c['within']}" for c in cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
