"""Looser stopping rules for the adaptive rounds, replayed on recorded self-checks (issue 21).

    python bench/stopping_rules_replay.py [REPORT.json ...]     (default: every 18-item self-check
                                                                 under reports/baselines dated 2026-11-27)

For each rule, each size's recorded rounds are cut where the rule would have stopped (a rule can
only stop earlier than the rounds recorded), the rounds cut come off the item's cost at that
size's own cost a round (its harness time a round, outside the timed work), and the size's speedup
is the median of the rounds kept. Prints, per rule: the median over reports of the median cost per
item, the reports at or below 3 s, and the share of sizes of at least 1 MiB (scored items) within
1.00 +- 0.03. A benchmark's table, not a test.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from pytest_kernelbench.metrics import timed_seconds  # noqa: E402
from pytest_kernelbench.rank.stats import band_within  # noqa: E402

MIB = 1 << 20
# (label, least rounds, band target for sizes >= 1 MiB, band target below, most rounds)
RULES = (("as run (+-3 %, 12-64 rounds)", 12, 0.03, 0.03, 64), ("band +-4 %", 12, 0.04, 0.04, 64),
         ("band +-5 %", 12, 0.05, 0.05, 64), ("at most 40 rounds", 12, 0.03, 0.03, 40),
         ("at most 32 rounds", 12, 0.03, 0.03, 32), ("+-5 % below 1 MiB only", 12, 0.03, 0.05, 64))


def stop(ratios: list[float], least: int, band: float, most: int) -> int:
    for r in range(least, min(len(ratios), most) + 1, 2):
        if band_within(ratios[:r], band):
            return r
    return min(len(ratios), most)


def replay(doc: dict, least: int, big_band: float, small_band: float, most: int) -> tuple[float, int, int]:
    """(median cost per item, sizes >= 1 MiB within +-0.03, such sizes) under the rule."""
    costs, within, n = [], 0, 0
    for item in doc["items"]:
        if item.get("outcome") != "passed":
            continue
        cost = item.get("overhead_s") or 0.0
        for s in item.get("sizes") or []:
            t = s.get("timing") or {}
            ref, cand = (t.get("reference") or {}).get("rounds_s"), (t.get("candidate") or {}).get("rounds_s")
            if not ref or not cand:
                continue
            ratios = [a / b for a, b in zip(ref, cand)]
            big = (t.get("set_bytes") or 0) >= MIB
            k = stop(ratios, least, big_band if big else small_band, most) if t.get("band_target") else len(ratios)
            spent = sum((t.get("spent_s") or {}).get(p, 0) for p in ("refill", "checks", "reference", "candidate"))
            cost -= (len(ratios) - k) * (spent - timed_seconds(s)) / len(ratios)
            if big and not item.get("unscored"):
                n, within = n + 1, within + (abs(statistics.median(ratios[:k]) - 1) <= 0.03)
        costs.append(cost)
    return (statistics.median(costs) if costs else float("nan")), within, n


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
        rows = [replay(d, least, big, small, most) for d in docs]
        w, n = sum(r[1] for r in rows), sum(r[2] for r in rows)
        print(f"| {label} | {statistics.median(r[0] for r in rows):.2f} | {sum(r[0] <= 3 for r in rows)} of {len(rows)} | "
              f"{100 * w / max(n, 1):.1f} % |")


if __name__ == "__main__":
    main(sys.argv[1:])
