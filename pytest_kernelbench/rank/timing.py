"""Side-by-side timing of reference and candidate, driven by the checker.

Protocol (same for both sides): warm-up; the reference's probe windows set how many calls a window
of either side holds, so a reference window lasts about `round_s` (fewer where the memory its
outputs and inputs take would pass the budget): the candidate's own probes would let it choose,
since it can tell them (a size's first windows, of 4 and 24 calls) and run slow there alone, so
that every window shrank until its fixed part (the barrier, "go", the synchronize, "done": about
0.5 ms on an H100) outweighed the calls and its speedup read near 1 whatever it was; then an even
number of rounds interleave ref, cand, cand, ref, ... (each goes first equally often,
so clock ramps, drift and a first-of-the-pair penalty hit both alike). Each round first puts
values no earlier round used in the inputs, then runs its two windows back to back (the pause
between a round's windows is where wall-clock jitter gets in: the candidate's checks wait until
after both). Every call of a window has an input slot of its own (rank/slots.py). The reference's
window runs in the reference process, the candidate's in the candidate process, both as batches
(rank/link.py), each process stopped outside its own windows (rank/timed.py). A window is wall
time on the checker's clock from a barrier across checkers and "go" to the device-synchronized
end; a rank's round time is per call; the job's is the max over ranks; the reported time is the
median over rounds. Where the paired speedup's noise band is wider than +-band_target, rounds
continue in pairs up to max_rounds, while the size's windows so far took less than SLOW_BUDGET times
what max_rounds rounds of round_s windows take (20 s at the GPU defaults: a candidate far slower
than the reference holds as many calls a window); past it, even the least rounds stop at the pair
that passed it.

A window's calls are lent all at once, so a candidate's first call could read them all and serve
the window with one exchange (a lookahead no call of a real program has). In each of the first
LONE_PAIRS rounds, both sides also run a window of one call on fresh values; a lone call has
nothing to see ahead, and the window's fixed part is the same harness code on both sides, so the
candidate's time per call is bounded below by what the lone calls say (stats.lookahead_bound),
and a size's speedup is capped where its windows beat that bound.

Baselines (rank/baselines.py, --kb-baselines): more sides, each a reference-process window of
another module. Each round then runs every side once on the round's values, the order rotated per
round (reference, candidate, baselines...; the next round starts one further on), each window
holding the reference's number of calls; the lone-call rounds, the adaptive band and the slow budget
stay the reference's and the candidate's (the budget counts their windows only). With no baseline
the rotation is the alternation above, unchanged.
"""
from __future__ import annotations

import functools
import math
import os
import statistics
from collections.abc import Callable
from typing import Any

from ..protocol import TimingSpec
from .stats import band_within

PAIR = ("reference", "candidate")      # the sides every round has; the others are baselines
PROBE_CALLS = 24
LONE_PAIRS = 4                  # rounds of one-call windows a size (the lookahead bound, stats.lookahead_bound)
SLOW_BUDGET = 16                # past SLOW_BUDGET * max_rounds rounds of round_s, no more rounds (adaptive timing)


class Timing:
    def __init__(self, agree_max: Callable[[float], float], heartbeat: Callable[[str], None], cfg: TimingSpec):
        self.agree_max = agree_max      # float -> max over ranks
        self.heartbeat = heartbeat
        adaptive = int(cfg.max_rounds) > int(cfg.rounds)
        rounds = max(5, int((adaptive and os.environ.get("KB_DEV_MIN_ROUNDS")) or cfg.rounds))     # a dev knob
        self.rounds = rounds + rounds % 2
        self.warmup = max(1, int(cfg.warmup))
        self.round_s = float(os.environ.get("KB_DEV_ROUND_S") or cfg.round_s)     # a dev knob (bench/split_knobs.sh)
        self.max_iters = int(cfg.max_iters)
        self.band_target = float(cfg.band_target)
        self.max_rounds = max(self.rounds, int(cfg.max_rounds))
        self.budget_s = SLOW_BUDGET * 2 * self.max_rounds * self.round_s     # both sides' windows of a size

    def run(self, phase: str, sides: dict[str, Callable[[int, str], float]], refill: Callable[[str, int, str | None], None],
            cap: Callable[[str], int], after_pair: Callable[[], None] | None = None,
            prepare: Callable[[int], None] | None = None, before: Callable[[str], None] | None = None,
            sizing: str = "reference") -> dict:
        """sides[name](calls, key) runs one window of `calls` calls and returns its seconds per call;
        refill(key, calls, first) puts new values in the inputs of a window of `calls` calls (once
        per round: both windows of a round run back to back on the same values; `first`: the side
        whose window comes first, None for a window alone); cap(name) is the most
        calls a window of that side may hold; after_pair() runs after each round and after each
        warm-up or probe window (the candidate's checks, kept out of the time between a round's
        windows);
        prepare(calls) is told the rounds' window size before they start; before(name) runs before
        every window (the inputs made as the round's refill left them, the device cache emptied);
        `sizing`: the side whose probes set the calls a window holds (the trusted one)."""
        iters = {}
        names = list(sides)       # the rotation's order: reference, candidate, then the baselines

        def window(name: str, calls: int, key: str, alone: bool = False) -> float:
            """One window; `alone` (warm-up, probes): with values of its own, checked at once."""
            if alone:       # no window sees values an earlier one saw (a round's two windows: the same)
                refill(key, calls, None)
            if before is not None:
                before(name)
            took = sides[name](calls, key)
            if alone and after_pair is not None:
                after_pair()
            return took

        sizing = sizing if sizing in sides else next(iter(sides))
        for name in sides:
            side = functools.partial(window, name)
            self.heartbeat(f"{phase}, timing warm-up, {name}")
            most = max(1, min(self.max_iters, cap(name)))      # the warm-up and the probes hold outputs too
            side(min(self.warmup, most), f"warm-{name}", True)
            if name != sizing:
                continue
            # two probe windows: the difference is the calls' cost alone, without the window's own
            # (barrier, wake-up, the description of its outputs)
            long_ = min(PROBE_CALLS, most)
            short = min(4, long_ // 2)
            t_short = side(short, f"probe-{name}-short", True) * short if short else 0.0
            t_long = side(long_, f"probe-{name}", True) * long_
            per_call = (t_long - t_short) / (long_ - short) if long_ > short else t_long / long_
            per_call = self.agree_max(max(per_call, 0.25 * t_long / long_))     # noise never makes it ~0
            want = math.ceil(self.round_s / max(per_call, 1e-9))
            iters[name] = int(self.agree_max(max(1, min(self.max_iters, want, cap(name)))))
        # both sides run the same number of calls per window, so both hold the same outputs
        n = iters[sizing]
        if prepare is not None:
            prepare(n)
        times: dict[str, list[float]] = {name: [] for name in sides}
        lone: dict[str, list[float]] = {name: [] for name in sides if name in PAIR}
        adaptive = self.max_rounds > self.rounds
        r = 0
        while self.more(r, n, times, adaptive):
            order = rotated(names, r)
            refill(f"{r}", n, order[0])
            for name in order:
                key = f"{r}{name[0]}" if name in PAIR else f"{r}:{name}"      # a baseline's: rank/timed.twin_key reads it
                self.heartbeat(f"{phase}, timing round {r + 1}/{self.rounds if r < self.rounds else self.max_rounds}, {name}")
                times[name].append(self.agree_max(window(name, n, key)))
            if after_pair is not None:
                after_pair()
            if r < LONE_PAIRS and n > 1:
                pair = tuple(name for name in order if name in PAIR)
                self.lone_round(phase, r, pair, window, refill, lone)
                if after_pair is not None:
                    after_pair()
            r += 1
        return {"iters": {name: n for name in sides}, "times": times, "lone": lone,
                "band_target": self.band_target if adaptive else None}

    def lone_round(self, phase: str, r: int, order: tuple[str, ...], window: Callable, refill: Callable,
                   lone: dict[str, list[float]]) -> None:
        """A round of one-call windows, each side's, in the round's order and on values of their own:
        a call that has no later call to see early, so the candidate's time per call in its windows
        cannot honestly beat its lone call's by more than the reference's does (the lookahead bound)."""
        refill(f"l{r}", 1, order[0])
        for name in order:
            self.heartbeat(f"{phase}, timing lone call {r + 1}/{LONE_PAIRS}, {name}")
            lone[name].append(self.agree_max(window(name, 1, f"l{r}{name[0]}")))

    def more(self, r: int, n: int, times: dict[str, list[float]], adaptive: bool) -> bool:
        """Whether round r runs: a round pair is never split; the least rounds run, and adaptive
        ones while the band is wide, until the windows so far pass the budget, past which adaptive
        timing stops at the pair that passed it (a candidate 1000x slower: 4 rounds of 10 s windows
        a size, not 12). A count the user asked for, and CPU timing, run exactly."""
        if r % 2:
            return True
        # the reference's and the candidate's windows only: a baseline never cuts the candidate's rounds
        over = adaptive and r >= 2 and n * sum(sum(t) for side, t in times.items() if side in PAIR) > self.budget_s
        if r < self.rounds:
            return not over
        return adaptive and r < self.max_rounds and not (over or self.settled(times))

    def settled(self, times: dict[str, list[float]]) -> bool:
        """The paired speedup's noise band lies within +-band_target of its median."""
        ratios = [a / b for a, b in zip(times["reference"], times["candidate"]) if a > 0 and b > 0]
        return band_within(ratios, self.band_target)


def rotated(names: list[str], r: int) -> tuple[str, ...]:
    """Round r's order: the sides turned r places (two sides: reference first in even rounds)."""
    k = r % len(names)
    return tuple(names[k:] + names[:k])


def summarize(rounds: list[float]) -> dict:
    """The job's time per round (already the max over ranks) and its median/min/max."""
    return {"median_s": statistics.median(rounds), "min_s": min(rounds), "max_s": max(rounds), "rounds_s": rounds}


# a window's parts: by the clock of the side that ran it (go .. seen), then by the checker's own
WINDOW_PARTS = ("go", "calls", "sync", "epilogue", "seen", "wake", "close", "read")


def window_parts(rows: list[tuple[float, ...]], window: Any, started: float, read_s: float) -> None:
    """A window's parts (the solver's clock: untrusted, diagnosis only; the checker's: `started`,
    when it began the window, and `read_s`, its reading of outputs at "done")."""
    st = window.done.stamps
    if len(st) == 4:
        rows.append((st[0] - window.opened, st[1] - st[0], st[2] - st[1], st[3] - st[2], window.seen - st[3],
                     window.opened - started, window.closed - window.seen, read_s))


def part_medians(rows: list[tuple[float, ...]]) -> dict:
    """Median microseconds per window of each part (go: the clock's start to the process taking "go":
    its SIGCONT, reading the batch, its probe of the GPU; calls: issuing
    them; sync: the device finishing; epilogue: describing the outputs and the checks in-process; seen:
    Done written to the checker seeing it; wake: the checker sending the batch to the stopped process
    and the barrier, up to the clock's start; close: "done" seen to the
    process stopped and its description of the outputs decoded; read: the outputs read at "done")."""
    return {name: round(statistics.median(r[k] for r in rows) * 1e6, 1) for k, name in enumerate(WINDOW_PARTS)}
