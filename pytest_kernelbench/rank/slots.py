"""The input slots of a size's timing: every call of a timed window gets memory of its own.

A set called twice in one window lets a candidate answer the second call with a copy of its
first answer (a cache keyed on the pointer, forgotten between windows, which it tells apart by
the pause between them): correct outputs, no communication, a false speedup. So a window of n
calls runs on n slots, and before each round the checker puts values no earlier round used in
them: the first `fresh` slots from the harness (what a generation costs bounds how many), the
others copies of those, so values repeat across slots but memory never does (pointers, L2 lines).

Both solver processes map the same slots. A round's two windows run back to back on the same
values, each from an empty device cache, and before the second one the checker compares the
slots with its pristine copy and restores them, whichever side went first: a candidate that wrote
to its inputs (which could slow the reference, or hide its own writes) is recorded; a reference
that did (an in-place problem's, or a harness bug) is only undone. The same pass before both
sides' second windows, because a window right after it runs slower: on an H100 with the pass
before the reference's second windows only, the reference read 1.007 against itself at large
sizes (windows of a few ms; the mean of seven items, two runs) and a round's first window was
1.3-1.6 % slower than its second; with the pass before both, 1.000-1.003 and 0.2-0.5 %
(reports/baselines/2026-11-27-h100x1-order.md).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from . import compare


def slot_count(in_bytes: int, cfg: Any) -> int:
    """The most slots a size's inputs may take: each slot and its pristine copy, plus the checker's
    own copy of the values the harness made (up to max_sets), within set_budget_bytes."""
    n = cfg.set_budget_bytes // max(3 * in_bytes, 1)
    if n > cfg.max_sets:
        n = (cfg.set_budget_bytes - cfg.max_sets * in_bytes) // max(2 * in_bytes, 1)
    return max(1, int(n))


class Slots:
    def __init__(self, lent: list[Any], layout: list[tuple[Any, int | None]], fresh: int, held: Any,
                 make: Callable[[str], Any], sync: Callable[[], None], torch: Any, flush: Any = None):
        """`lent`: the slots as the checker sees them (views of arenas lent to both processes);
        `layout`: each arena with the bytes one slot takes in it (None where the slots are not
        evenly spaced: copies then go slot by slot); `fresh`: how many slots a round fills from the
        harness; `held`: the values every slot holds until its first refill (the checker's copy);
        `flush`: a device buffer twice the L2 (None: no device cache to empty)."""
        self.lent, self.layout, self.make, self.sync, self.torch = lent, layout, make, sync, torch
        self.flush = flush
        self.count = len(lent)
        self.fresh = max(1, min(fresh, self.count))
        self.priv: list[Any] = [held] * self.count
        # evenly spaced slots: later slots are copies of the first `fresh`, so only those are kept
        self.pristine = [torch.empty_like(arena.base[:self.fresh * stride if stride else arena.nbytes])
                         for arena, stride in layout]
        self.filled = 0           # slots filled by the last refill
        self.fresh_filled = 1     # of which the harness made the first this many (the rest: copies)
        self.kept = False         # whether it kept a pristine copy
        self.dirty: str | None = None   # the side that ran a window since the last refill
        self.make_s = 0.0         # of the refills' time, the harness making new values (diagnostics)

    def refill(self, key: str, calls: int, keep: bool = True, writing: Callable[[], None] | None = None) -> None:
        """Values no earlier round used in the first `calls` slots; `keep`: and a pristine copy of
        them, for before() to compare with and restore from before a round's second window (a
        window alone, a warm-up or probe, needs none). `writing()` runs once the new values are
        made and before any of them reaches a slot."""
        calls = max(1, min(calls, self.count))
        f = min(calls, self.fresh)
        t = time.perf_counter()
        made = [self.make(f"round{key}set{k}") for k in range(f)]
        self.make_s += time.perf_counter() - t
        if writing is not None:
            writing()
        pairs: list = []
        for k, new in enumerate(made):
            compare.refill(self.lent[k], new, into=pairs)
            self.priv[k] = compare.adopt(self.priv[k], new)
        compare.copy_all(pairs)
        for k in range(f, calls):
            self.priv[k] = self.priv[k % f]
        if calls > f:
            self._copies(f, calls)
        if keep:       # where slots are evenly spaced, the rest are copies of the first f: keep only those
            for (arena, stride), copy in zip(self.layout, self.pristine):
                end = f * stride if stride else arena.nbytes
                copy[:end].copy_(arena.base[:end])
        self.sync()
        self.filled, self.fresh_filled, self.kept, self.dirty = calls, f, keep, None

    def _copies(self, f: int, calls: int) -> None:
        strides = [stride for _, stride in self.layout]
        if all(strides):
            for (arena, _), stride in zip(self.layout, strides):   # slot k: a copy of slot k mod f
                assert stride is not None
                rows = arena.base[:self.count * stride].view(self.count, stride)
                for start in range(f, calls, f):
                    m = min(f, calls - start)
                    rows[start:start + m].copy_(rows[:m])
        else:
            pairs: list = []
            for k in range(f, calls):
                compare.refill(self.lent[k], self.lent[k % f], into=pairs)
            compare.copy_all(pairs)

    def _blocks(self, stride: int | None, nbytes: int) -> list[tuple[int, int, int]]:
        """(start, end, length) byte ranges of the filled slots, each against the pristine copy's
        first `length` bytes (evenly spaced: f slots at a time; else the whole arena at once)."""
        if not stride:
            return [(0, nbytes, nbytes)]
        f, out = self.fresh_filled, []
        for start in range(0, self.filled, f):
            m = min(f, self.filled - start)
            out.append((start * stride, (start + m) * stride, m * stride))
        return out

    def before(self, side: str, inplace: bool) -> bool:
        """Before `side`'s window: after the other side's window (a round's second), compare the
        slots with the pristine copy and restore them; then empty the device cache (each window
        starts cold: whoever went second would otherwise find the round's values warm). False
        when the candidate's window changed them (it wrote to inputs it was only to read)."""
        first, self.dirty = self.dirty, side
        intact = True
        if first is not None and first != side:
            assert self.kept, "the round's refill kept no pristine copy to restore from"
            for (arena, stride), keep in zip(self.layout, self.pristine):
                for start, end, n in self._blocks(stride, arena.nbytes):
                    if not inplace and intact:
                        intact = bool(self.torch.equal(arena.base[start:end], keep[:n]))
                    if inplace or not intact:
                        arena.base[start:end].copy_(keep[:n])
        if self.flush is not None:
            self.flush.zero_()
        self.sync()
        return intact or inplace or first != "candidate"
