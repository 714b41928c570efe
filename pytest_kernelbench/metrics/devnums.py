"""Per size, the numbers a kernel developer reads in nccl-tests: nccl-tests' size S in bytes
(`bytes_per_rank`), each side's p99 over the rounds next to its median (every round's time is
already the max over ranks), algbw = S / t and, where the problem declares its collective,
busbw = algbw x the collective's factor (spec/bandwidth.py). Pure functions over the size dicts
the ranks reported; the controller adds these keys (session.run_item), the report carries them.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from ..spec.bandwidth import Scale, algbw, busbw

SIDES = ("reference", "candidate")


def percentile(xs: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between order statistics (numpy's
    default): with few rounds the p99 lies between the two slowest."""
    xs = sorted(x for x in xs if isinstance(x, (int, float)) and math.isfinite(x))
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def annotate(sizes: list[dict], collective: str | None, scale: Scale | None, world_size: int | None) -> None:
    """Add bytes_per_rank, timing.<side>.p99_s, algbw_GBps and busbw_GBps ({reference, candidate},
    GB/s of 1e9 bytes, from each side's median) to each size that has what they need; each
    baseline's (--kb-baselines) p99_s, algbw_GBps and busbw_GBps go into its own timing.baselines.<name>."""
    for s in sizes:
        timing = s.get("timing") or {}
        others = [t for t in (timing.get("baselines") or {}).values() if isinstance(t, dict)]
        for t in [timing.get(side) for side in SIDES] + others:
            if isinstance(t, dict) and t.get("rounds_s"):
                t["p99_s"] = percentile(t["rounds_s"], 99)
        nbytes = scale.size_bytes(s.get("config") or {}, world_size or 1) if scale else None
        if nbytes is None:
            continue
        s["bytes_per_rank"] = nbytes
        raw = {side: (timing.get(side) or {}).get("median_s") for side in SIDES}
        medians = {k: float(v) for k, v in raw.items() if isinstance(v, (int, float)) and v > 0}
        if not medians:
            continue
        s["algbw_GBps"] = {k: algbw(nbytes, v) for k, v in medians.items()}
        bus = collective if collective and collective != "none" and world_size else None
        if bus and world_size:
            s["busbw_GBps"] = {k: busbw(nbytes, v, bus, world_size) for k, v in medians.items()}
        for t in others:
            if isinstance(t.get("median_s"), (int, float)) and t["median_s"] > 0:
                t["algbw_GBps"] = algbw(nbytes, t["median_s"])
                if bus and world_size:
                    t["busbw_GBps"] = busbw(nbytes, t["median_s"], bus, world_size)
