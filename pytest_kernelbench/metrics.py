"""Scores from item records: per-size speedup, per-item geometric mean and verdict tier, and the
aggregates over a run (Pass rate, GM-Speedup, Pass x GM, PASS+Good, fast_p, pass@k) with
breakdowns. Pure functions over plain dicts, so reports can be recomputed from a JSONL file.
"""
from __future__ import annotations

import math
from collections import defaultdict
from math import comb

CATEGORIES = ("no_code", "compile_error", "runtime_error", "crash", "mismatch", "timeout",
              "forbidden_call", "edit_outside_region")
TIERS = (("better", 1.20), ("on_par", 0.95), ("degraded", 0.60), ("severely_degraded", 0.0))
FAST_P = (0.0, 1.0, 1.5, 2.0)
BREAKDOWNS = ("category", "parallelism", "difficulty", "libraries")


def geomean(xs) -> float | None:
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def verdict(score: float | None) -> str | None:
    if score is None:
        return None
    for name, lower in TIERS:
        if score >= lower:
            return name
    return TIERS[-1][0]


def item_score(sizes: list[dict]) -> float | None:
    """Each size counts equally: the geometric mean of per-size speedups."""
    return geomean([s.get("speedup") for s in sizes])


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimator (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        k = n
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def _scored(items):
    return [i for i in items if i.get("outcome") in ("passed", "failed")]


def aggregate(items: list[dict]) -> dict:
    """Aggregates over finished (passed or failed) items; skipped items are counted apart."""
    done = _scored(items)
    total = len(done)
    passed = [i for i in done if i["outcome"] == "passed"]
    scores = [i.get("score") for i in passed]
    gm = geomean(scores)
    tiers = defaultdict(int)
    for i in passed:
        if i.get("verdict"):
            tiers[i["verdict"]] += 1
    timed = any(i.get("score") is not None for i in passed)   # --kb-timing=off gives no scores
    out = {
        "total": total,
        "passed": len(passed),
        "failed": total - len(passed),
        "skipped": sum(1 for i in items if i.get("outcome") == "skipped"),
        # the model's API failed (not the model's code): neither passed nor failed
        "errors": sum(1 for i in items if i.get("outcome") == "error"),
        "pass_rate": len(passed) / total if total else None,
        "gm_speedup": gm,
        "pass_x_gm": ((len(passed) / total) * gm if gm else 0.0) if total and (timed or not passed) else None,
        "pass_good": (tiers["on_par"] + tiers["better"]) / total if total and (timed or not passed) else None,
        "tiers": dict(tiers),
        "fast_p": {str(p): (sum(1 for i in passed if (i.get("score") or 0) > p) / total
                            if total and (timed or not passed) else None) for p in FAST_P},
        "failures": dict(_count(i.get("failure") for i in done if i["outcome"] == "failed")),
        "roofline_gm": geomean([(i.get("roofline") or {}).get("candidate") for i in passed]),
        "suspect": sum(1 for i in passed if i.get("suspect")),
    }
    from . import usage
    cost = usage.totals(items)
    if cost:
        out["cost"] = cost
    samples = _samples(items)
    if samples:
        out.update(samples)
    return out


def _count(values):
    counts = defaultdict(int)
    for v in values:
        counts[v] += 1
    return counts


def _samples(items) -> dict:
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
            c = sum(1 for i in group if i["outcome"] == "passed")
            fc = sum(1 for i in group if i["outcome"] == "passed" and (i.get("score") or 0) > 1.0)
            p.append(pass_at_k(n, c, k))
            f.append(pass_at_k(n, fc, k))
        res[f"pass@{k}"] = sum(p) / len(p)
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
                          ("total", "passed", "pass_rate", "gm_speedup", "pass_x_gm", "pass_good")}
                    for tag, group in sorted(groups.items())}
    return out
