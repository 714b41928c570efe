"""Side-by-side timing of reference and candidate, driven by the checker.

Protocol (same for both sides): warm-up; a probe sets how many calls a window holds, so a window
lasts about `round_s` (fewer where the outputs a window holds would pass the memory budget, and
never more calls than input sets: no set is called twice in a window, see set_count); then an even
number of rounds interleave ref, cand, cand, ref, ... (each goes first equally often, so clock
ramps, drift and a first-of-the-pair penalty hit both alike). Before each window the sets it uses
are refilled in place with values no earlier window used. The reference's window runs in the
reference process (its twin candidate process stopped meanwhile), the candidate's in the
candidate process (the reference process stopped), both as batches (rank/link.py). A window is
wall time on the checker's clock from a barrier across checkers and "go" to the
device-synchronized end; a rank's round time is per call; the job's is the max over ranks; the
reported time is the median over rounds. Where the paired speedup's noise band is wider than
+-band_target, rounds continue in pairs up to max_rounds.
"""
from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable
from typing import Any

from ..protocol import TimingSpec
from .stats import median_band

PROBE_CALLS = 24


class Timing:
    def __init__(self, agree_max: Callable[[float], float], heartbeat: Callable[[str], None], cfg: TimingSpec):
        self.agree_max = agree_max      # float -> max over ranks
        self.heartbeat = heartbeat
        rounds = max(5, int(cfg.rounds))
        self.rounds = rounds + rounds % 2
        self.warmup = max(1, int(cfg.warmup))
        self.round_s = float(os.environ.get("KB_DEV_ROUND_S") or cfg.round_s)     # a dev knob (bench/split_knobs.sh)
        self.max_iters = int(cfg.max_iters)
        self.band_target = float(cfg.band_target)
        self.max_rounds = max(self.rounds, int(cfg.max_rounds))

    def run(self, phase: str, sides: dict[str, Callable[[int, str], float]], refill: Callable[[str, int], None],
            cap: Callable[[str], int], after_pair: Callable[[], None] | None = None) -> dict:
        """sides[name](calls, key) runs one window of `calls` calls on the current sets and returns
        its seconds per call; refill(key, calls) puts fresh values in the sets a window of `calls`
        calls uses; cap(name) is the most calls a window of that side may hold (the memory its
        outputs take, and one input set per call)."""
        iters = {}
        for name, side in sides.items():
            self.heartbeat(f"{phase}, timing warm-up, {name}")
            most = max(1, min(self.max_iters, cap(name)))      # the warm-up and the probes hold outputs too
            # two probe windows: the difference is the calls' cost alone, without the window's own
            # (barrier, wake-up, the description of its outputs)
            long_ = min(PROBE_CALLS, most)
            short = min(4, long_ // 2)
            refill(f"warm-{name}", max(long_, min(self.warmup, most)))
            side(min(self.warmup, most), f"warm-{name}")
            t_short = side(short, f"probe-{name}-short") * short if short else 0.0
            t_long = side(long_, f"probe-{name}") * long_
            if after_pair is not None:
                after_pair()
            per_call = (t_long - t_short) / (long_ - short) if long_ > short else t_long / long_
            per_call = self.agree_max(max(per_call, 0.25 * t_long / long_))     # noise never makes it ~0
            want = math.ceil(self.round_s / max(per_call, 1e-9))
            iters[name] = int(self.agree_max(max(1, min(self.max_iters, want, cap(name)))))
        # both sides run the same number of calls per window, so both hold the same outputs
        n = min(iters.values())
        times: dict[str, list[float]] = {name: [] for name in sides}
        adaptive = self.max_rounds > self.rounds
        r = 0
        while r < self.rounds or (adaptive and r < self.max_rounds and (r % 2 or not self.settled(times))):
            order = ("reference", "candidate") if r % 2 == 0 else ("candidate", "reference")
            if paired():
                refill(f"{2 * r}", n)
            for name in order:
                key = f"{2 * r + (name == 'candidate')}"
                if not paired():
                    refill(key, n)
                self.heartbeat(f"{phase}, timing round {r + 1}/{self.rounds if r < self.rounds else self.max_rounds}, {name}")
                times[name].append(self.agree_max(sides[name](n, key)))
            if after_pair is not None:
                after_pair()
            r += 1
        return {"iters": {name: n for name in sides}, "times": times,
                "band_target": self.band_target if adaptive else None}

    def settled(self, times: dict[str, list[float]]) -> bool:
        """The paired speedup's noise band lies within +-band_target of its median."""
        ratios = [a / b for a, b in zip(times["reference"], times["candidate"]) if a > 0 and b > 0]
        band = median_band(ratios)
        if not band or not ratios:
            return False
        mid = statistics.median(ratios)
        return band[0] >= mid * (1 - self.band_target) and band[1] <= mid * (1 + self.band_target)


def reuse_sets() -> bool:
    """KB_DEV_SET_REUSE=1: the earlier protocol, fewer sets met again within a window (to measure
    what one set per call costs; never for a real run: it lets a replaying candidate through)."""
    return os.environ.get("KB_DEV_SET_REUSE") == "1"


def paired() -> bool:
    """KB_DEV_PAIR=1 (an experiment): one refill per round and the candidate's checks after both
    windows, so a round's two windows run back to back."""
    return os.environ.get("KB_DEV_PAIR") == "1"


def set_count(set_bytes: int, l2_bytes: int, cfg: TimingSpec) -> int:
    """Input sets a size's timing holds, which bounds the calls of a window: every call of a window
    gets a set of its own. A set met twice in one window lets a candidate answer the second call
    with a copy of the first answer (a cache keyed on the pointer and forgotten between windows,
    told apart by the pause between them): correct outputs, no communication, a false speedup.
    As many sets as the set budget holds, up to max_sets; together they span 3x L2 where they can."""
    budget = max(2, cfg.set_budget_bytes // max(set_bytes, 1))
    if reuse_sets():
        n = max(2, math.ceil(3 * l2_bytes / max(set_bytes, 1))) if l2_bytes else 2
        return int(min(n, cfg.max_sets, budget))
    return int(min(cfg.max_sets, budget))


def summarize(rounds: list[float]) -> dict:
    """The job's time per round (already the max over ranks) and its median/min/max."""
    return {"median_s": statistics.median(rounds), "min_s": min(rounds), "max_s": max(rounds), "rounds_s": rounds}


WINDOW_PARTS = ("go", "calls", "sync", "epilogue", "seen")   # a window's parts, by the clock of the side that ran it


def window_parts(rows: list[tuple[float, ...]], window: Any) -> None:
    """A window's parts by the clock of the process that ran it (untrusted: diagnosis only)."""
    st = window.done.stamps
    if len(st) == 4:
        rows.append((st[0] - window.opened, st[1] - st[0], st[2] - st[1], st[3] - st[2], window.seen - st[3]))


def part_medians(rows: list[tuple[float, ...]]) -> dict:
    """Median microseconds per window of each part (go: "go" to the candidate taking it; calls: issuing
    them; sync: the device finishing; epilogue: describing the outputs and the checks in-process; seen:
    Done written to the checker seeing it)."""
    return {name: round(statistics.median(r[k] for r in rows) * 1e6, 1) for k, name in enumerate(WINDOW_PARTS)}
