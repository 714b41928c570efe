"""One line per self-check report: items passed, sizes >= 1 MiB within 1.00 +- 0.03 (of scored
items, and of all: the unscored host-FIFO items' too, as earlier evidence counted them), the
median harness cost per item, its rounds, the harness's own ms per round and the share of
windows over 3 % longer than their side's median (the machine's noise); then the same
rounds replayed with fewer least rounds (the adaptive rule stopped where it would have).

    python bench/selfcheck_summary.py REPORT.json[=LABEL] ...

A benchmark's table, not a test: the figures depend on the machine and its load.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from pytest_kernelbench.cli import overhead  # noqa: E402
from pytest_kernelbench.metrics import timed_seconds  # noqa: E402
from pytest_kernelbench.rank.stats import band_within  # noqa: E402

MIB = 1 << 20
REPLAY_LEAST = (12, 10, 8)
SLOW = 1.03     # a window this much longer than its side's median counts as slow (the rounds' rounds as run)


def plain_within(ratios: list[float], target: float) -> bool:
    """The band's test as it was until 2026-11-27's sixth session, for replays: the plain order
    statistics (96.1 % at 12 rounds, 97.9 % at 16)."""
    return band_within(ratios, target, interpolate=False)


def stop_at(ratios: list[float], least: int, band: float, most: int = 64, within=band_within) -> int:
    """Where the adaptive rule (rank/timing.py: even counts from `least`, band within +-band)
    stops on these rounds; the rounds' own count where it never would have before they ran out."""
    for r in range(least, min(len(ratios), most) + 1, 2):
        if within(ratios[:r], band):
            return r
    return len(ratios)


def at_least_mib(size: dict) -> bool:
    return ((size.get("timing") or {}).get("set_bytes") or 0) >= MIB


def summary(doc: dict, least: int | None = None, band: float | None = None, small_band: float | None = None,
            most: int = 64, band_test=band_within, skip: int = 0) -> dict:
    """The report's figures; with `least`, each size's rounds cut where the adaptive rule would
    have stopped from that least count, at most `most` rounds, with its noise band (`band_test`: the
    band's test, the interpolated one by default) within +-`band` (sizes of at least 1 MiB) and
    +-`small_band` (below), each the size's own target where not given; `skip`: that many first
    rounds run (and cost) but left out of the band and the speedup, as an uncounted warm-up round."""
    costs, rounds = [], []
    within, n, within_all, n_all = 0, 0, 0, 0
    slow, windows = 0, 0
    for item in doc["items"]:
        if item.get("outcome") != "passed":
            continue
        cost, item_rounds = item.get("overhead_s") or 0.0, 0
        for s in item.get("sizes") or []:
            t = s.get("timing") or {}
            ref, cand = (t.get("reference") or {}).get("rounds_s"), (t.get("candidate") or {}).get("rounds_s")
            if not ref or not cand:
                continue
            ratios = [a / b for a, b in zip(ref, cand)]
            for side in (ref, cand):      # the machine's noise: windows over 3 % longer than their side's median
                mid = statistics.median(side)
                slow, windows = slow + sum(x > SLOW * mid for x in side), windows + len(side)
            k, x = len(ratios), s.get("speedup")
            if least is not None and t.get("band_target"):
                target = band if at_least_mib(s) else small_band
                k = min(len(ratios), skip + stop_at(ratios[skip:skip + most], least, target or t["band_target"],
                                                    within=band_test))
                spent = sum((t.get("spent_s") or {}).get(p, 0) for p in ("refill", "checks", "reference", "candidate"))
                own = (spent - timed_seconds(s)) / len(ratios)
                cost -= (len(ratios) - k) * own
                x = statistics.median(ratios[skip:k])
            item_rounds += k
            if at_least_mib(s) and x is not None:
                ok = abs(x - 1.0) <= 0.03
                n_all, within_all = n_all + 1, within_all + ok
                if not item.get("unscored"):
                    n, within = n + 1, within + ok
        costs.append(cost)
        rounds.append(item_rounds)
    passed = sum(i.get("outcome") == "passed" for i in doc["items"])
    med = overhead.medians(doc) or {}
    return {"passed": f"{passed}/{len(doc['items'])}", "within": f"{within}/{n}", "within_all": f"{within_all}/{n_all}",
            "within_counts": (within, n),
            "cost": statistics.median(costs) if costs else float("nan"),
            "rounds": statistics.median(rounds) if rounds else 0, "own_ms": med.get("own_ms_per_round", float("nan")),
            "slow": slow / windows if windows else float("nan")}


def main(argv: list[str]) -> None:
    print("| report | variant | replayed least rounds | passed | sizes >= 1 MiB within +-0.03: scored | all "
          "| median cost per item s | median rounds per item | own ms per round | slow windows |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for arg in argv:
        path, _, label = arg.partition("=")
        doc = json.loads(Path(path).read_text())
        for least in (None, *REPLAY_LEAST):
            s = summary(doc, least)
            print(f"| {Path(path).name} | {label or '-'} | {least or 'as run'} | {s['passed']} | {s['within']} | {s['within_all']} | "
                  f"{s['cost']:.2f} | {s['rounds']:.0f} | {s['own_ms']:.1f} | {s['slow']:.0%} |")


if __name__ == "__main__":
    main(sys.argv[1:])
