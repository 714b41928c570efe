"""The statistics of paired timing rounds, used where the rounds run (adaptive rounds stop when
the band is narrow) and by the metrics after the run. Standard library only."""
from __future__ import annotations

import math
import statistics
from math import comb

BAND_COVERAGE = 0.95


def median_band(ratios: list[float], coverage: float = BAND_COVERAGE) -> tuple[float, float] | None:
    """Distribution-free confidence interval of the median of paired ratios: the order statistics
    q_(k) and q_(n+1-k) with the largest k whose two-sided coverage 1 - 2 P(Bin(n, 1/2) < k) is at
    least `coverage` (n = 12 rounds: the 3rd smallest and the 3rd largest, 96.1 %; n = 16: the
    4th, 97.9 %)."""
    q = sorted(r for r in ratios if r is not None and r > 0 and math.isfinite(r))
    n = len(q)
    if n < 2:
        return None
    k, tail = 1, 0.0
    while True:
        tail += comb(n, k - 1) / 2 ** n         # P(Bin(n, 1/2) <= k - 1)
        if 1 - 2 * tail < coverage or k > n // 2:
            break
        k += 1
    k = max(1, k - 1)
    return q[k - 1], q[n - k]


def band_within(ratios: list[float], target: float) -> bool:
    """The median's noise band lies within +-target of the median (adaptive rounds stop here)."""
    band = median_band(ratios)
    if not band or not ratios:
        return False
    mid = statistics.median(ratios)
    return band[0] >= mid * (1 - target) and band[1] <= mid * (1 + target)


def paired_ratios(timing: dict) -> list[float]:
    """Reference and candidate rounds ran interleaved, so round r of each is one pair measured
    under the same conditions: t_ref,r / t_cand,r."""
    ref = (timing.get("reference") or {}).get("rounds_s") or []
    cand = (timing.get("candidate") or {}).get("rounds_s") or []
    return [r / c for r, c in zip(ref, cand) if c and c > 0 and r > 0]


def paired_speedup(timing: dict) -> float | None:
    ratios = paired_ratios(timing)
    return statistics.median(ratios) if ratios else None


def size_band(timing: dict) -> tuple[float, float] | None:
    """A size's noise band: the confidence interval of its paired speedup (the median ratio)."""
    return median_band(paired_ratios(timing))
