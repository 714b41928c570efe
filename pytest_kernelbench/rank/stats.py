"""The statistics of paired timing rounds, used where the rounds run (adaptive rounds stop when
the band is narrow) and by the metrics after the run. Standard library only."""
from __future__ import annotations

import math
import statistics
from functools import lru_cache
from math import comb

BAND_COVERAGE = 0.95
BAND_METHOD = "interpolated order statistics"     # each size's timing record names it (median_band)


@lru_cache(maxsize=None)
def order_coverage(n: int, d: int) -> float:
    """The coverage of [q_(d), q_(n+1-d)] for the median of n rounds: P(d <= B <= n - d), B ~ Bin(n, 1/2)."""
    return sum(comb(n, i) for i in range(d, n - d + 1)) / 2 ** n


@lru_cache(maxsize=None)
def _order_weights(n: int, coverage: float) -> tuple[int, float]:
    """(d, lam): the largest d, at most n // 2, whose [q_(d), q_(n+1-d)] covers at least `coverage`
    (1 where none does), and how far toward q_(d+1), q_(n-d) the interpolation moves (0: not at all)."""
    d = 1
    while d < n // 2 and order_coverage(n, d + 1) >= coverage:
        d += 1
    wide = order_coverage(n, d)
    if wide <= coverage or d >= n // 2:
        return d, 0.0
    share = (wide - coverage) / (wide - order_coverage(n, d + 1))
    return d, (n - d) * share / (d + (n - 2 * d) * share)


def median_band(ratios: list[float], coverage: float = BAND_COVERAGE,
                interpolate: bool = True) -> tuple[float, float] | None:
    """The confidence interval of the median of paired ratios, by interpolated order statistics
    (Hettmansperger and Sheather, 1986): q_(d) and q_(n+1-d) with the largest d whose coverage is
    at least `coverage`, moved toward q_(d+1) and q_(n-d) by as much as brings it to `coverage`.
    The plain order statistics (`interpolate=False`, the band until 2026-11-27) cover more than
    asked (96.1 % at 12 rounds, 97.9 % at 16, 98.7 % at 14), so a size ran rounds to narrow a band
    wider than its own 95 %; interpolated, the coverage stays close to 95 % for continuous
    distributions of the ratios (their paper; the Monte Carlo test here: 93-97 % at 12-64 rounds
    for normal, skewed and stall-like noise). With 12 rounds: 0.74 q_(3) + 0.26 q_(4) and its
    mirror. Below 6 rounds (the extremes cover less than asked): the extremes."""
    q = sorted(r for r in ratios if r is not None and r > 0 and math.isfinite(r))
    n = len(q)
    if n < 2:
        return None
    d, lam = _order_weights(n, coverage)
    if not interpolate or not lam:
        return q[d - 1], q[n - d]
    return (1 - lam) * q[d - 1] + lam * q[d], (1 - lam) * q[n - d] + lam * q[n - d - 1]


def band_within(ratios: list[float], target: float, interpolate: bool = True) -> bool:
    """The median's noise band lies within +-target of the median (adaptive rounds stop here)."""
    band = median_band(ratios, interpolate=interpolate)
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


def lookahead_bound(timing: dict, tol: float) -> dict | None:
    """The least time per call a candidate's windows may be credited with, from its lone calls
    (rank/timing.py): a window of one call takes F + c on either side, F the harness's fixed part
    (the same code in the same kind of process), so the candidate's call takes at least
    c_ref + (T_cand(1) - T_ref(1)), c_ref the reference's time per call in its windows; taken at
    the pair least favourable to that bound, less the pairs' spread (their noise: a self-check
    read against itself must never be capped), and less `tol` of it. None: no lone calls.
    {"bound_s": that time (<= 0: the noise at this size hides any bound), "lone_s": each side's
    lone windows, "capped": whether the candidate's windows beat it (then its speedup is at most
    c_ref / bound_s)."""
    lone = timing.get("lone") or {}
    ref, cand = lone.get("reference") or [], lone.get("candidate") or []
    if not ref or not cand:
        return None
    c_ref, c_cand = timing["reference"]["median_s"], timing["candidate"]["median_s"]
    diffs = [c - r for r, c in zip(ref, cand)]
    bound = (1 - tol) * (c_ref + min(diffs) - (max(diffs) - min(diffs)))
    return {"bound_s": bound, "lone_s": {"reference": ref, "candidate": cand},
            "capped": bound > 0 and c_cand < bound}
