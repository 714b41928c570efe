"""One size's timing pass, run by the rank (main.Rank.run_size): the input sets (3x L2, agreed
across ranks), the interleaved rounds (timing.Timing), the anti-caching passes on the timing
buffers (checks.after_timing), and the size's times, paired speedup and noise band."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import metrics
from . import checks, compare
from .failures import ItemFailed

if TYPE_CHECKING:
    from .main import Rank


def time_size(rank: Rank, size: str, record: dict, expected: Any) -> None:
    """Side-by-side timing of one size (timing.Timing), then the anti-caching passes on the timing
    buffers; the size's times, speedup and noise band go into `record`."""
    from .timing import Timing, summarize
    t0 = time.perf_counter()
    torch = rank.torch
    probe = rank.make_inputs(size, "time0")
    set_bytes = sum(v.numel() * v.element_size() for _, v in compare.leaves((probe, expected))
                    if isinstance(v, torch.Tensor))
    # every rank must use the same number of sets (each call is a collective), while output
    # bytes differ per rank (rank 0 of a gather holds everything): agree on the max
    set_bytes = int(rank.agree_max(set_bytes))
    tcfg = rank.job.timing
    l2 = int(tcfg.l2_bytes or 0)
    if not l2 and rank.device_kind == "cuda":
        l2 = int(getattr(torch.cuda.get_device_properties(rank.device), "L2_cache_size", 0) or 0)
    n_sets = max(2, math.ceil(3 * l2 / max(set_bytes, 1))) if l2 else 2
    n_sets = int(min(n_sets, tcfg.max_sets, max(2, tcfg.set_budget_bytes // max(set_bytes, 1))))
    sets = [probe] + [rank.make_inputs(size, f"time{k}") for k in range(1, n_sets)]

    def refill(round_no: int | str) -> None:
        for k, s in enumerate(sets):
            compare.refill(s, rank.make_inputs(size, f"round{round_no}set{k}"))

    def candidate_guard(active: bool):
        # Timing arms and disarms around each candidate round (a callback, not a with-block)
        rank.forbid.active = active
        rank.shield.armed = active
        if not active:
            v = rank.violations()
            if v:
                rank.timing_violation = v

    rank.timing_violation = None

    def ref(*a: Any) -> Any:
        return rank.reference.solution(*a)

    def cand(*a: Any) -> Any:
        return rank.candidate(*a)

    timer = Timing(rank.clocks, rank.agree_max, rank.files.heartbeat, tcfg)
    try:
        measured = timer.run(f"size {size}", ref, cand, sets, refill, candidate_guard)
    except ItemFailed:
        raise                           # the guards' own verdict (unsafe, ...) stands
    except BaseException as e:  # noqa: BLE001 - candidate code ran inside
        rank.die("runtime_error", f"size {size}, timing: {type(e).__name__}: {e}", "candidate", e)
    if measured["leftover_threads"]:
        mine = {"category": "runtime_error", "message": f"threads still running after a timed round: {measured['leftover_threads']}"}
    elif rank.timing_violation:
        mine = {"category": "forbidden_call", "message": f"during timing: {rank.timing_violation}"}
    else:
        mine = after_timing_check(rank, size, sets, refill)
    everyone = rank.agree({"times": measured["times"], **mine})
    rank.fail_if_any(everyone, f"size {size}, check after timing", record)
    timing = {name: summarize([v["times"][name] for v in everyone]) for name in ("reference", "candidate")}
    for name in timing:
        timing[name]["iters"] = measured["iters"][name]
    record["timing"] = {**timing, "sets": n_sets, "set_bytes": set_bytes, "band_target": measured["band_target"]}
    # rounds of the two sides were interleaved, so the median of per-round ratios cancels drift
    # that a ratio of separate medians keeps; its confidence interval is the size's noise band
    record["speedup_of_medians"] = timing["reference"]["median_s"] / max(timing["candidate"]["median_s"], 1e-12)
    record["speedup"] = metrics.paired_speedup(timing)
    band = metrics.size_band(timing)
    record["band"] = list(band) if band else None
    record["timing_s"] = time.perf_counter() - t0

def after_timing_check(rank: Rank, size: str, sets: list, refill: Callable[[int | str], None]) -> dict:
    """The anti-caching passes (checks.after_timing) on this rank's timing buffers."""
    phase = f"size {size}, check after timing"

    def refill_some():   # the second pass: new values on alternate ranks (which ones alternates by set)
        for k, s in enumerate(sets):
            if (rank.rank + k) % 2:
                compare.refill(s, rank.make_inputs(size, f"after2set{k}"))

    found = checks.after_timing(
        sets, lambda s: rank.call_candidate(s, phase, watch_dispatch=True),
        lambda s: rank.call_reference(s, phase), lambda: refill("after"), refill_some,
        rank.job.tolerance, rank.job.inplace, getattr(rank.harness, "check", None))
    v = rank.violations()
    if v:
        return {"category": "forbidden_call", "message": v}
    return found or {"category": None, "message": None}
