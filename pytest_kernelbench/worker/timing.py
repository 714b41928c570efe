"""Side-by-side timing of reference and candidate inside one rank.

Protocol (same for both): common warm-up; a probe sets calls per round so a round lasts about
`round_s`; then an even number of rounds interleave ref, cand, cand, ref, ... (each goes first
equally often, so clock ramps, drift and a first-of-the-pair penalty hit both alike; with an odd
count a bimodal round time handed one side the slow median: a self-check read 1.20x on 4xH200).
A round: refill the input sets in place with values no earlier round used (a call that is slower
on unseen data, e.g. new allocation sizes after data-dependent routing, pays that in every round,
not only when it happens to go first on a pair's shared data), barrier,
device-wide synchronize, start event, `iters` calls cycling over the sets, device-wide
synchronize (so side-stream and thread work is inside the window), end event. A rank's round
time is per call; the job's round time is the max over ranks; the reported time is the median
over rounds. Every decision that changes the number of collective calls is agreed across ranks.
Where the paired speedup's noise band (the median's confidence interval over round pairs) is
wider than +-band_target, rounds continue in pairs up to max_rounds; the band that remains is
reported and the verdict uses it.
"""
from __future__ import annotations

import math
import statistics

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..metrics import median_band
from ..protocol import TimingSpec

if TYPE_CHECKING:
    from .clocks import ClockSet


class Timing:
    def __init__(self, clocks: ClockSet, agree_max: Callable[[float], float], heartbeat: Callable[[str], None],
                 cfg: TimingSpec):
        self.clocks = clocks
        self.agree_max = agree_max      # float -> max over ranks
        self.heartbeat = heartbeat
        rounds = max(5, int(cfg.rounds))
        self.rounds = rounds + rounds % 2
        self.warmup = max(1, int(cfg.warmup))
        self.round_s = float(cfg.round_s)
        self.max_iters = int(cfg.max_iters)
        self.thread_wait_s = float(cfg.thread_wait_s)
        self.band_target = float(cfg.band_target)
        self.max_rounds = max(self.rounds, int(cfg.max_rounds))

    def _round(self, fn: Callable, sets: list, iters: int) -> tuple[float, list[str]]:
        c = self.clocks
        c.barrier()
        c.sync(self.thread_wait_s)
        if c.cuda:
            start, end = c.event(), c.event()
            c.record(start)
        t0 = c.perf_counter()
        for i in range(iters):
            fn(*sets[i % len(sets)])
        leftover = c.sync(self.thread_wait_s)
        if c.cuda:
            c.record(end)
            elapsed = c.elapsed_s(start, end)
        else:
            elapsed = c.perf_counter() - t0
        return elapsed / iters, leftover

    def run(self, phase: str, ref: Callable, cand: Callable, sets: list, refill: Callable[[int], None],
            on_candidate_round: Callable[[bool], None]) -> dict:
        """ref/cand: callables; sets: list of input tuples; refill(key): fresh values in place, new for every key;
        on_candidate_round(active: bool): turns candidate guards on/off around candidate rounds."""
        impls = {"reference": ref, "candidate": cand}
        iters = {}
        for name, fn in impls.items():
            self.heartbeat(f"{phase}, timing warm-up, {name}")
            on_candidate_round(name == "candidate")
            try:
                for i in range(self.warmup):
                    fn(*sets[i % len(sets)])
                per_call, _ = self._round(fn, sets, min(3, self.max_iters))
            finally:
                on_candidate_round(False)
            per_call = self.agree_max(per_call)
            iters[name] = max(1, min(self.max_iters, math.ceil(self.round_s / max(per_call, 1e-9))))
        times: dict[str, list[float]] = {name: [] for name in impls}
        agreed: dict[str, list[float]] = {name: [] for name in impls}   # the job's round times
        adaptive = self.max_rounds > self.rounds
        leftovers: list[str] = []
        r = 0
        while r < self.rounds or (adaptive and r < self.max_rounds and (r % 2 or not self.settled(agreed))):
            order = ("reference", "candidate") if r % 2 == 0 else ("candidate", "reference")
            for name in order:
                refill(2 * r + (name == "candidate"))
                self.heartbeat(f"{phase}, timing round {r + 1}/{self.rounds if r < self.rounds else self.max_rounds}, {name}")
                on_candidate_round(name == "candidate")
                try:
                    t, left = self._round(impls[name], sets, iters[name])
                finally:
                    on_candidate_round(False)
                if left and name == "candidate":
                    leftovers = left
                times[name].append(t)
                if adaptive:     # every rank decides on the same (max over ranks) times
                    agreed[name].append(self.agree_max(t))
            r += 1
        return {"iters": iters, "times": times, "leftover_threads": leftovers,
                "band_target": self.band_target if adaptive else None}

    def settled(self, agreed: dict[str, list[float]]) -> bool:
        """The paired speedup's noise band lies within +-band_target of its median."""
        ratios = [a / b for a, b in zip(agreed["reference"], agreed["candidate"]) if a > 0 and b > 0]
        band = median_band(ratios)
        if not band or not ratios:
            return False
        mid = statistics.median(ratios)
        return band[0] >= mid * (1 - self.band_target) and band[1] <= mid * (1 + self.band_target)


def summarize(per_rank_times: list[list[float]]) -> dict:
    """Rounds x ranks -> the job's time per round (max over ranks) and its median/min/max."""
    rounds = [max(ts) for ts in zip(*per_rank_times)]
    return {"median_s": statistics.median(rounds), "min_s": min(rounds), "max_s": max(rounds),
            "rounds_s": rounds}
