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
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from selfcheck_summary import REPO, plain_within, summary  # noqa: E402

from pytest_kernelbench.rank.stats import band_within  # noqa: E402


class Rule(NamedTuple):
    label: str
    least: int          # rounds a size runs at least
    band: float         # band target, sizes of at least 1 MiB
    small_band: float   # and below
    most: int           # rounds at most
    test: Callable      # the band's test: the plain order statistics (as the recorded runs used) or the interpolated
    skip: int = 0       # first rounds run as a warm-up, left out of the band and the speedup

    def summary(self, doc: dict) -> dict:
        return summary(doc, self.least, self.band, self.small_band, self.most, band_test=self.test, skip=self.skip)


PLAIN = Rule("plain order statistics (+-3 %, 12-64 rounds)", 12, 0.03, 0.03, 64, plain_within)
INTERPOLATED = Rule("interpolated order statistics (+-3 %, 12-64 rounds)", 12, 0.03, 0.03, 64, band_within)
RULES = (PLAIN,
         Rule("band +-4 %", 12, 0.04, 0.04, 64, plain_within), Rule("band +-5 %", 12, 0.05, 0.05, 64, plain_within),
         Rule("at most 40 rounds", 12, 0.03, 0.03, 40, plain_within),
         Rule("at most 32 rounds", 12, 0.03, 0.03, 32, plain_within),
         Rule("+-5 % below 1 MiB only", 12, 0.03, 0.05, 64, plain_within),
         INTERPOLATED,
         # a size's first round is slow on both sides (new slots, the windows' first outputs of
         # that many calls): its ratio reads 0.93 at the median, against 1.00 for the rest
         Rule("interpolated, the first round a warm-up", 12, 0.03, 0.03, 64, band_within, skip=1))


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
    for rule in RULES:
        rows = [rule.summary(d) for d in docs]
        w, n = sum(r["within_counts"][0] for r in rows), sum(r["within_counts"][1] for r in rows)
        print(f"| {rule.label} | {statistics.median(r['cost'] for r in rows):.2f} | {sum(r['cost'] <= 3 for r in rows)} of "
              f"{len(rows)} | {100 * w / max(n, 1):.1f} % |")

    if each:
        print("\n| report | as run: cost s, within | plain band replayed | interpolated band replayed |")
        print("|---|---|---|---|")
        for name, doc in zip(names, docs):
            cells = [summary(doc), PLAIN.summary(doc), INTERPOLATED.summary(doc)]
            print(f"| {name} | " + " | ".join(f"{c['cost']:.2f}, {c['within']}" for c in cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
