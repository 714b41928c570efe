"""Scores from item records: per-size speedup, per-item geometric mean and verdict tier, and the
aggregates over a run (Pass rate, GM-Speedup, Pass x GM, PASS+Good, fast_p, pass@k) with
breakdowns. Pure functions over plain dicts, so reports can be recomputed from a JSONL file.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from math import comb
from typing import Any

from ..protocol import (  # noqa: F401 (their one home)
    COUNTED, GOOD_TIERS, SHARED_PLACEMENT, TIERS, Disposition, Failure, Outcome, Tier, disposition_of, tier)
from ..rank.stats import BAND_COVERAGE, median_band, paired_ratios, paired_speedup, size_band  # noqa: F401

CATEGORIES = tuple(Failure)
FAST_P = (0.0, 1.0, 1.5, 2.0)
BREAKDOWNS = ("category", "parallelism", "difficulty", "libraries", "family")


def geomean(xs: Iterable[Any]) -> float | None:
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def verdict(score: float | None, band: tuple | list | None = None) -> Tier | None:
    """The tier of `score`, except that a score whose noise band holds 1.0 is on_par: the paired
    rounds cannot tell it from the reference. No score (CPU, timing off): no verdict."""
    if score is None:
        return None
    if band is not None and band[0] is not None and band[0] <= 1.0 <= band[1]:
        return Tier.ON_PAR
    return tier(score)


def item_band(sizes: list[dict]) -> tuple[float, float] | None:
    """GM over sizes of the per-size band ends (each size counts equally, as in the score)."""
    bands = [s.get("band") for s in sizes]
    if not bands or any(b is None for b in bands):
        return None
    lo, hi = geomean([b[0] for b in bands if b]), geomean([b[1] for b in bands if b])
    return (lo, hi) if lo is not None and hi is not None else None


def item_score(sizes: list[dict]) -> float | None:
    """Each size counts equally: the geometric mean of per-size speedups."""
    return geomean([s.get("speedup") for s in sizes])


def timed_seconds(size: dict) -> float:
    """What a size's timed windows took, both sides and any baseline's (--kb-baselines): each
    round's time per call times its calls (the rest of an item's wall time is the harness's own)."""
    timing = size.get("timing") or {}
    sides = [*timing.values(), *(timing.get("baselines") or {}).values()]
    return sum(t * tm.get("iters", 0) for tm in sides if isinstance(tm, dict) for t in tm.get("rounds_s", []))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimator (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        k = n
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def gm_band(records: list[dict]) -> tuple[float, float] | None:
    """GM of the band ends over records that each carry a "band" (the items of a run, as
    item_band does over sizes); None when one of them has none."""
    return item_band(records)


def speed_change(base: float | None, base_band: Sequence[float] | None, new: float | None,
                 new_band: Sequence[float] | None, threshold: float, higher_is_better: bool = True) -> str | None:
    """How `new` stands against `base`: "regression" or "improvement" when it differs by more than
    `threshold` (a fraction) and the noise bands do not overlap (the rounds tell the two apart),
    else "noise". Without bands (reports older than schema 2) the threshold alone decides. None
    when either has no score (CPU, timing off): there is no speed to compare."""
    if base is None or new is None or base <= 0:
        return None
    rel = new / base - 1.0
    if abs(rel) <= threshold:
        return "noise"
    if base_band and new_band and base_band[0] <= new_band[1] and new_band[0] <= base_band[1]:
        return "noise"
    return "improvement" if (rel > 0) == higher_is_better else "regression"


def pass_by_round(items: list[dict]) -> list[float]:
    """Cumulative pass rate by refinement round: entry r-1 is the share of counted items (one per
    problem and sample) that passed in one of rounds 1..r. An item without a round summary ran one
    round. The last entry is the pass rate."""
    done = _scored(items)
    if not done:
        return []
    first_pass: list[int | None] = []
    last = 1
    for i in done:
        rounds = i.get("rounds") or [{"round": i.get("round") or 1, "outcome": i.get("outcome")}]
        last = max([last] + [r.get("round") or 1 for r in rounds])
        passed = [r.get("round") or 1 for r in rounds if r.get("outcome") == Outcome.PASSED]
        first_pass.append(min(passed) if passed else None)
    return [sum(1 for f in first_pass if f is not None and f <= r) / len(done) for r in range(1, last + 1)]


def usd_per_problem(items: list[dict]) -> float | None:
    """USD a model's candidates cost per problem: the run's spend (every sample and round) over the
    distinct problems counted. None when no item came from a model."""
    from . import usage
    cost = usage.totals(items)
    problems = {i.get("problem") for i in items if i.get("outcome") in COUNTED}   # spent on, verdict or not
    if not cost or not problems:
        return None
    return cost["usd"] / len(problems)


def _scored(items: Iterable[dict]) -> list[dict]:
    """The records with a verdict on the candidate (disposition valid: passed or failed)."""
    return [i for i in items if disposition_of(i.get("outcome")) == Disposition.VALID]


def retryable(items: Iterable[dict]) -> list[dict]:
    """The records without one for a reason of the infrastructure (outcome error: harness_error,
    api_error, invalid_problem, a lost worker): counted apart, never as a zero for the candidate."""
    return [i for i in items if i.get("outcome") == Outcome.ERROR]


def speed_scored(items: Iterable[dict]) -> list[dict]:
    """The items whose speedup counts: all but those of a problem marked `unscored` (its speed is
    reported in its own figure, latency or bandwidth, because the design it prescribes cannot be
    measured fairly against the reference; problem.yaml says why) and those whose ranks shared a
    GPU (--kb-oversubscribe: correctness only, never timed, never a speed figure's item)."""
    return [i for i in items if not i.get("unscored") and not is_shared(i)]


def is_shared(item: dict) -> bool:
    """Whether an item's ranks shared GPUs (record["placement"] == "shared"): correctness only."""
    return item.get("placement") == SHARED_PLACEMENT


def aggregate(items: list[dict]) -> dict:
    """Aggregates over the items with a verdict on the candidate (disposition valid: passed or
    failed); items with no result for a reason that is not the candidate's (outcome error,
    disposition retryable) are counted apart ("errors", with their reasons), as skipped items are
    with theirs: an infrastructure failure is never a zero for the candidate. Speed aggregates exist only where speed was measured (GPU timing):
    None otherwise, never a fake 0. They count the items whose speed is scored (speed_scored):
    GM-Speedup over those that passed, Pass x GM, PASS+Good and fast_p over those counted. A
    reference copy (failure reference_copy) is a counted failure like any other: never a pass."""
    done = _scored(items)
    total = len(done)
    passed = [i for i in done if i["outcome"] == Outcome.PASSED]
    speed_done = speed_scored(done)
    speed_passed = speed_scored(passed)
    speed_total = len(speed_done)
    gm = geomean([i.get("score") for i in speed_passed])
    tiers: dict[str, int] = defaultdict(int)
    for i in speed_passed:
        if i.get("verdict"):
            tiers[i["verdict"]] += 1
    # speed counts only when every scored passed item has a score (CPU or --kb-timing=off give none)
    timed = bool(speed_passed) and all(i.get("score") is not None for i in speed_passed)
    speed = bool(speed_total) and timed
    fast = {str(p): (sum(1 for i in speed_passed if (i.get("score") or 0) > p) / speed_total if speed else None)
            for p in FAST_P}
    out = {
        "total": total,
        "passed": len(passed),
        "failed": sum(1 for i in done if i["outcome"] == Outcome.FAILED),
        "errors": len(retryable(items)),         # retryable: run again, not counted in any rate
        "retry_reasons": dict(_count(i.get("failure") for i in retryable(items))),
        "skipped": sum(1 for i in items if i.get("outcome") == Outcome.SKIPPED),
        "pass_rate": len(passed) / total if total else None,
        "gm_speedup": gm if timed else None,
        "pass_x_gm": (len(speed_passed) / speed_total) * gm if speed and gm else None,
        "pass_good": sum(tiers[t] for t in GOOD_TIERS) / speed_total if speed else None,
        # KernelBench's fast_1 (correct and faster than the reference), published beside Pass x GM
        "fast_1": fast["1.0"],
        "tiers": dict(tiers),
        "fast_p": fast,
        "unscored": total - speed_total - sum(1 for i in done if is_shared(i) and not i.get("unscored")),
        "shared": sum(1 for i in done if is_shared(i)),       # counted for correctness, outside every speed figure
        "reference_copies": sum(1 for i in done if i.get("failure") == Failure.REFERENCE_COPY),
        "failures": dict(_count(i.get("failure") for i in done if i["outcome"] != Outcome.PASSED)),
        "skip_reasons": dict(_count(i.get("message") or Outcome.SKIPPED for i in items
                                    if i.get("outcome") == Outcome.SKIPPED)),
        "roofline_gm": geomean([(i.get("roofline") or {}).get("candidate") for i in passed if not is_shared(i)]),
        "suspect": sum(1 for i in passed if i.get("suspect") and not is_shared(i)),
        "family_weighted": family_weighted(done),
    }
    from . import usage
    cost = usage.totals(items)
    if cost:
        out["cost"] = cost
    samples = _samples(items)
    if samples:
        out.update(samples)
    return out


def family_weighted(done: list[dict]) -> dict | None:
    """The pass rate, GM-Speedup and Pass x GM with every family of near-duplicate problems
    (problem.yaml `family`, e.g. the all-reduce variants) weighing as much as one problem: an item
    weighs 1 / (counted items of its family); a problem without a family is its own. None without
    counted items; the speed figures None where speed was not measured."""
    if not done:
        return None
    size: dict[str, int] = defaultdict(int)
    for i in done:
        size[i.get("family") or i.get("problem") or ""] += 1
    weight = {id(i): 1.0 / size[i.get("family") or i.get("problem") or ""] for i in done}
    total = sum(weight.values())
    passed = [i for i in done if i["outcome"] == Outcome.PASSED]
    out: dict = {"families": len(size), "pass_rate": sum(weight[id(i)] for i in passed) / total,
                 "gm_speedup": None, "pass_x_gm": None}
    scored = speed_scored(done)
    timed = [i for i in speed_scored(passed) if i.get("score") and i["score"] > 0]
    if scored and timed and len(timed) == len(speed_scored(passed)):
        w_all = sum(weight[id(i)] for i in scored)
        w_passed = sum(weight[id(i)] for i in timed)
        gm = math.exp(sum(weight[id(i)] * math.log(i["score"]) for i in timed) / w_passed)
        out.update(gm_speedup=gm, pass_x_gm=w_passed / w_all * gm)
    return out


def _count(values: Iterable[Any]) -> defaultdict[Any, int]:
    counts: defaultdict[Any, int] = defaultdict(int)
    for v in values:
        counts[v] += 1
    return counts


def _samples(items: list[dict]) -> dict:
    """pass@k and fast_1@k when several samples per problem exist (item['sample'] set)."""
    by_problem = defaultdict(list)
    for i in _scored(items):
        if i.get("sample") is not None:
            by_problem[i["problem"]].append(i)
    if not by_problem or all(len(v) < 2 for v in by_problem.values()):
        return {}
    k_max = max(len(v) for v in by_problem.values())
    res = {}
    for k in sorted({1, k_max}):
        p, f = [], []
        for group in by_problem.values():
            n = len(group)
            c = sum(1 for i in group if i["outcome"] == Outcome.PASSED)
            p.append(pass_at_k(n, c, k))
            timed = [i for i in group if not is_shared(i)]     # fast_1@k is a speed figure: never a shared GPU's
            if timed:
                fc = sum(1 for i in timed if i["outcome"] == Outcome.PASSED and (i.get("score") or 0) > 1.0)
                f.append(pass_at_k(len(timed), fc, min(k, len(timed))))
        res[f"pass@{k}"] = sum(p) / len(p)
        if f:
            res[f"fast_1@{k}"] = sum(f) / len(f)
    return {"samples": res}


def breakdowns(items: list[dict]) -> dict:
    """The aggregates per value of each breakdown key (an item counts under each of its tags)."""
    out = {}
    for key in BREAKDOWNS:
        groups = defaultdict(list)
        for i in items:
            tags = i.get(key)
            for tag in (tags if isinstance(tags, (list, tuple)) else [tags]):
                if tag:
                    groups[tag].append(i)
        out[key] = {tag: {k: v for k, v in aggregate(group).items() if k in
                          ("total", "passed", "pass_rate", "gm_speedup", "pass_x_gm", "pass_good", "fast_1")}
                    for tag, group in sorted(groups.items())}
    return out


# ---- a problem's own figure of merit (problem.yaml `metric`) ---------------------------------------
METRIC_UNITS = {"latency": "us", "bandwidth": "GB/s"}


def size_metric(metric: str, size: dict) -> dict | None:
    """Latency (us per call: every call is one round trip, barrier or ping-pong) or bandwidth
    (link_bytes of harness.cost() per second, higher is better) of both sides at one size, from
    the median times. The speedup stays t_ref / t_cand, which for bandwidth is bw_cand / bw_ref,
    so Pass x GM means the same across metrics. None for `time` or without timing."""
    if metric not in METRIC_UNITS:
        return None
    timing = size.get("timing") or {}
    out: dict = {"name": metric, "unit": METRIC_UNITS[metric]}
    for side in ("reference", "candidate"):
        med = (timing.get(side) or {}).get("median_s")
        if not med or med <= 0:
            return None
        if metric == "latency":
            out[side] = med * 1e6
        else:
            link = (size.get("cost") or {}).get("link_bytes") or 0.0
            out[side] = link / med / 1e9
    return out


def annotate_metric(sizes: list[dict], metric: str) -> None:
    for s in sizes:
        m = size_metric(metric, s)
        if m is not None:
            s["metric"] = m
