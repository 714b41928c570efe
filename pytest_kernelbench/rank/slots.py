"""The input slots of a size's timing: every call of a timed window gets memory of its own.

A set called twice in one window lets a candidate answer the second call with a copy of its
first answer (a cache keyed on the pointer, forgotten between windows, which it tells apart by
the pause between them): correct outputs, no communication, a false speedup. So a window of n
calls runs on n slots, and before each round the checker puts values no earlier round used in
them: the first `fresh` slots from the harness (what a generation costs bounds how many), the
others copies of those, so values repeat across slots but memory never does (pointers, L2 lines).
At W > 1 a rank's own values repeat, but the job's inputs do not: copy slot k holds, on rank r,
fresh set (u_k + v_k * r) mod fresh, where the pairs (u_k, v_k), v_k != 0, are drawn without
repeats from the job's key and the round (the same on every rank, unknown to candidates), so no
two calls of a window meet the same inputs on every rank (up to fresh * (fresh - 1) copies), and
no rank can tell from its own inputs which sets its peers hold. Copied alike on every rank, the
job's inputs repeated, and a candidate that replayed a call's answer when its own values came
back (the ranks agreeing, no data exchanged) was right with a false speedup; now such a replay
answers for inputs the job never had, which the checks of timed calls catch. A candidate that
rebuilt an answer from what earlier calls brought it (its peers' fresh sets) would first have to
learn, from a peer, which sets that call holds: a message a call. At W = 1 there is nothing to
learn, so the copies are plain (slot k holds set k mod fresh).

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

import hashlib
import hmac
import random
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
                 make: Callable[[str], Any], sync: Callable[[], None], torch: Any, flush: Any = None,
                 rank: int = 0, world: int = 1, seed: str = ""):
        """`lent`: the slots as the checker sees them (views of arenas lent to both processes);
        `layout`: each arena with the bytes one slot takes in it (None where the slots are not
        evenly spaced: copies then go slot by slot); `fresh`: how many slots a round fills from the
        harness; `held`: the values every slot holds until its first refill (the checker's copy);
        `flush`: a device buffer twice the L2 (None: no device cache to empty); `rank`, `world`:
        the job's; `seed`: the job's key (the same on every rank: which sets the copies hold)."""
        self.lent, self.layout, self.make, self.sync, self.torch = lent, layout, make, sync, torch
        self.flush, self.rank, self.world, self.seed = flush, rank, world, seed
        self.src: list[int] = []  # per filled slot: the fresh slot whose values it holds
        self.src_on: dict[Any, Any] = {}      # self.src as an index tensor, per device (made once a refill)
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
        self.filled, self.fresh_filled = calls, f
        self.src, self.src_on = self._sources(key, f, calls), {}
        for k in range(f, calls):
            self.priv[k] = self.priv[self.src[k]]
        if calls > f:
            self._copies()
        if keep:       # where slots are evenly spaced, the rest are copies of the first f: keep only those
            for (arena, stride), copy in zip(self.layout, self.pristine):
                end = f * stride if stride else arena.nbytes
                copy[:end].copy_(arena.base[:end])
        self.sync()
        self.kept, self.dirty = keep, None

    def _sources(self, key: str, f: int, calls: int) -> list[int]:
        """Per slot, the fresh slot whose values it holds on this rank (the module's docstring)."""
        if self.world == 1 or f == 1:
            return [k % f for k in range(calls)]
        n, pairs = calls - f, f * (f - 1)
        rng = random.Random(hmac.new(self.seed.encode(), f"{key}|copies".encode(), hashlib.sha256).digest())
        draws = rng.sample(range(pairs), min(n, pairs)) + [rng.randrange(pairs) for _ in range(n - pairs)]
        return list(range(f)) + [(m // (f - 1) + (1 + m % (f - 1)) * self.rank) % f for m in draws]

    def _src_index(self, device: Any) -> Any:
        if device not in self.src_on:
            self.src_on[device] = self.torch.tensor(self.src, device=device)
        return self.src_on[device]

    def _plain(self) -> list[tuple[int, int]]:
        """W = 1: the filled slots as (first slot, slots) runs of f, each a copy of the first."""
        f = self.fresh_filled
        return [(start, min(f, self.filled - start)) for start in range(0, self.filled, f)]

    def _copies(self) -> None:
        f, calls = self.fresh_filled, self.filled
        strides = [stride for _, stride in self.layout]
        if all(strides):
            for (arena, _), stride in zip(self.layout, strides):
                assert stride is not None
                rows = arena.base[:self.count * stride].view(self.count, stride)
                if self.world == 1:
                    for start, m in self._plain()[1:]:
                        rows[start:start + m].copy_(rows[:m])
                else:
                    self.torch.index_select(rows[:f], 0, self._src_index(rows.device)[f:calls], out=rows[f:calls])
        else:
            pairs: list = []
            for k in range(f, calls):
                compare.refill(self.lent[k], self.lent[self.src[k]], into=pairs)
            compare.copy_all(pairs)

    def _against(self, rows: Any, kept: Any) -> Any:
        """(the filled slots' rows, what they should hold) by blocks of at most f rows."""
        f, calls = self.fresh_filled, self.filled
        if self.world == 1:
            for start, m in self._plain():
                yield rows[start:start + m], kept[:m]
            return
        yield rows[:f], kept[:f]
        idx = self._src_index(rows.device)
        for start in range(f, calls, f):
            end = min(calls, start + f)
            yield rows[start:end], kept.index_select(0, idx[start:end])

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
                if stride:
                    rows = arena.base[:self.count * stride].view(self.count, stride)
                    blocks = self._against(rows, keep[:self.fresh_filled * stride].view(-1, stride))
                else:      # slots not evenly spaced: the pristine copy is the whole arena's
                    blocks = iter([(arena.base[:arena.nbytes], keep)])
                for now, then in blocks:
                    if not inplace and intact:
                        intact = bool(self.torch.equal(now, then))
                    if inplace or not intact:
                        now.copy_(then)
        if self.flush is not None:
            self.flush.zero_()
        self.sync()
        return intact or inplace or first != "candidate"
