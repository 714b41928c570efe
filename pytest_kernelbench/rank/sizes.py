"""One size, as the checker runs it: the trials, then its timed part (rank/timed.py).

Every candidate call is a batch (rank/link.py); after each, the checker judges what it saw itself:
- what the candidate process reported at "done" (an exception, threads still running, forbidden
  calls counted in its process, the global torch state changed, multicast tried);
- processes still alive below the candidate (a build tool's time is the import and first call);
- the outputs, read by the checker at "done" and again after a settle (work deferred past "done"
  changes them), laid out in memory the candidate allocated (not an input it was lent, not another
  call's output), and compared with the reference, which the checker runs on its own copy;
- the inputs it lent, read back: unchanged, or (in-place problems) changed as the reference's were.
"""
from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from ..protocol import SETUP_MARK, Failure, Sets, reported_category
from . import baselines, checks, compare, memory
from .failures import AgreedFailure
from .globalstate import RULE
from .timed import time_size

if TYPE_CHECKING:
    from .link import Window


class Checker(Protocol):
    """What a size run needs of its rank's checker (rank/checker.py; named here so the two modules do
    not import each other)."""
    job: Any
    rank: int
    world: int
    key: str
    files: Any
    link: Any
    ref: Any
    driver: Any
    arenas: dict[int, Any]
    device: Any
    dtype: Any
    harness: Any
    reference: Any

    @property
    def torch(self) -> Any: ...
    def agree(self, obj: object) -> list: ...
    def agree_max(self, x: float) -> float: ...
    def barrier(self) -> None: ...
    def store_barrier(self, name: str, timeout_s: float, what: str) -> None: ...
    def sync(self) -> None: ...
    def batch_timeout(self) -> float: ...
    def next_arena(self) -> int: ...
    def arena_ranges(self, lent: list) -> list[tuple[int, int]]: ...
    def die(self, category: str, message: str, where: str, exc: BaseException | None = None) -> NoReturn: ...
    def unsafe_check(self, phase: str) -> None: ...
    def make_inputs(self, size: str, what: str, turn: int = 0) -> Any: ...
    def call_reference(self, args: tuple, phase: str, beat: bool = True) -> Any: ...
    def reference_untouched(self, phase: str) -> None: ...



class SizeRun:
    def __init__(self, c: Checker, size: str):
        self.c, self.size, self.job, self.torch = c, size, c.job, c.torch
        assert c.link is not None
        self.link = c.link
        self.cuda = self.job.device == "cuda"
        # GPU windows wait by spinning (a wake-up through the socket costs tens of microseconds);
        # CPU ranks would starve each other spinning (KB_SPIN=1 forces it, to test that path on CPU)
        self.spin = self.cuda or os.environ.get("KB_SPIN") == "1"
        self.record: dict[str, Any] = {"name": size, "config": self.job.sizes[size], "trials": []}
        self.held: list[tuple[int, int]] = []      # bytes of outputs the candidate still holds (earlier trials)
        self.pending: dict | None = None                # the first failure seen in a timed window

    # ---- lending inputs ------------------------------------------------------------------------------
    def lend(self, sets: list[Any], reference: bool = False) -> list[Any]:
        """Put input sets into new arenas the candidate maps (one per device type the inputs use), and
        the reference process too when `reference` (timing: both sides read the same memory); returns
        the checker's views of them."""
        links = [self.link] + ([self.c.ref] if reference and self.c.ref is not None else [])
        c = self.c
        devices = {"cpu": self.torch.device("cpu"), "cuda": c.device}
        ids = {kind: c.next_arena() + k for k, kind in enumerate(devices)}
        ends = dict.fromkeys(devices, 0)
        trees, placed, marks = [], [], []
        for obj in sets:
            tree, leaves = memory.layout(obj, ids, ends)
            trees.append(tree)
            placed += leaves
            marks.append(dict(ends))
        self.lent_layout = []     # (arena, bytes a set takes in it where every set takes the same, else None)
        for kind, end in ends.items():
            if end:
                arena = memory.Arena(ids[kind], devices[kind], end, c.driver)
                stride = marks[0][kind]
                even = all(m[kind] == (j + 1) * stride for j, m in enumerate(marks))
                self.lent_layout.append((arena, stride if even else None))
                c.arenas[arena.id] = self.link.arenas[arena.id] = arena
                msg, fds = arena.message()
                for link in links:
                    link.send(msg, fds)
        for leaf, value in placed:
            c.arenas[leaf["a"]].view(int(leaf["o"]), leaf["s"], leaf["st"], memory.dtype_of(leaf["d"])).copy_(value)
        for link in links:
            link.send(Sets(trees))
        c.sync()
        return [memory.build(t, c.arenas) for t in trees]

    # ---- judging one window ------------------------------------------------------------------------
    def inspect(self, window: Window, indices: list[int], phase: str, first: bool, settle: bool = True) -> dict[int, Any]:
        """The outputs of the listed calls as the checker read them at "done" (Link.read_done, where
        the window's were read then; else now), after the checks that end the item at once (their
        rank's error file) or set `self.verdict_now`."""
        c, done = self.c, window.done
        self.verdict_now: tuple[str, str] | None = None
        c.unsafe_check(phase)
        if done.unsafe:
            c.die(Failure.UNSAFE, f"{phase}: {done.unsafe}", "candidate")
        if done.failed:
            f = done.failed
            # its own account names only a candidate category (protocol.reported_category)
            category = Failure.FORBIDDEN_CALL if done.forbidden else reported_category(f.get("category"))
            extra = f" (and it called forbidden APIs: {_calls(done.forbidden)})" if done.forbidden else ""
            raise _failed(category, f"{phase}: {f.get('message')}{extra}", f.get("traceback", ""))
        if done.threads:
            c.die(Failure.RUNTIME_ERROR, f"{phase}: solution() returned while Python threads it started were still "
                  f"running ({', '.join(map(str, done.threads))}); all work must finish inside the call", "candidate")
        if not first:
            alive = self.link.children()
            if alive:
                c.die(Failure.FORBIDDEN_CALL, f"{phase}: a process the candidate started was still alive after the call "
                      f"(pids {alive[:5]}); child processes may only run while the candidate is imported and in "
                      "its first call of a size (builds)", "candidate")
        if len(done.outputs) != window.calls:
            c.die(Failure.RUNTIME_ERROR, f"{phase}: the candidate process broke the protocol (described "
                  f"{len(done.outputs)} outputs for {window.calls} calls)", "candidate")
        if done.forbidden:
            text = f"called forbidden APIs ({', '.join(self.job.forbid)}): {_calls(done.forbidden)}"
            rule = compare.forbidden_rule(done.forbidden)     # barrier-only: a rule stricter than PKB's
            self.verdict_now = (Failure.FORBIDDEN_CALL, compare.tagged(text, rule) if rule else text)
        elif done.state:
            self.verdict_now = (Failure.FORBIDDEN_CALL, f"changed the {RULE} and did not restore it before "
                                f"returning: {'; '.join(map(str, done.state))}")
        overlap = self.overlaps(window.spans, done.lent)
        if overlap and not self.verdict_now:
            self.verdict_now = (Failure.MISMATCH, overlap)
        if window.read_at is None:          # not read at "done" (a trial): now
            self.link.read_done(window, indices)
        if window.unreadable:
            self.verdict_now = self.verdict_now or (Failure.MISMATCH, f"{window.unreadable} (return fresh tensors, "
                                                                      "allocated in the call)")
            return {}
        outs = window.outputs
        if settle:
            self.settled(window, indices, outs, phase)
        return outs

    def settled(self, window: Window, indices: list[int], outs: dict[int, Any], phase: str,
                since: float | None = None) -> None:
        """The outputs read again after a settle, long enough for a side stream's work left behind
        (microseconds to a few ms): any change fails the item. `since`: when the first read was
        made; the checker's own work since counts half (it shared the GPU with what was left)."""
        if not outs:
            return
        if self.cuda:
            wait = min(0.02, max(0.002, 0.25 * window.seconds))
            if since is not None:
                wait -= 0.5 * (time.perf_counter() - since)
            if wait > 0:
                time.sleep(wait)
        try:
            again = self.link.read(window, indices)
        except memory.MemoryError_ as e:     # its memory unmapped or its description changed since "done"
            self.c.die(Failure.RUNTIME_ERROR, f"{phase}: its outputs could not be read again after solution() "
                       f"returned ({e}); outputs must stay as they were returned", "candidate")
        for i in indices:
            late = compare.differs(again[i], outs[i])
            if late:
                self.c.die(Failure.RUNTIME_ERROR, f"{phase}: {late} changed after solution() returned (work still "
                           "running on a thread or on a stream the current stream does not wait for); all work must "
                           "finish inside the call", "candidate")

    def inputs_after(self, window: Window, k: int, lent: Any) -> Any:
        """An in-place call's result: its input set as the candidate left it (an element of a list
        may have been rebound, not written), read by the checker; else the lent memory itself."""
        if not self.job.inplace or not window.done.inputs:
            return lent
        try:
            return self.link.read_inputs(window, k)
        except memory.MemoryError_:
            return lent

    def overlaps(self, spans: list[list[tuple[int, int]]], lent: list) -> str | None:
        return checks.shared_storage(spans, self.c.arena_ranges(lent), self.held, self.job.inplace)

    # ---- the size --------------------------------------------------------------------------------
    def run(self) -> dict:
        c, job, size = self.c, self.job, self.size
        try:
            # a multi-node problem's cost() takes `nodes` to split intra- from inter-node bytes
            extra = {"nodes": job.nodes} if _takes_nodes(c.harness.cost) else {}
            cost = c.harness.cost(job.sizes[size], c.world, c.dtype, **extra)
            self.record["cost"] = {k: float(v) for k, v in cost.items()}
        except Exception as e:
            c.die(Failure.HARNESS_ERROR, f"harness.cost() failed for size {size}: {type(e).__name__}: {e}", "harness", e)
        t0 = time.perf_counter()
        expected = self.trials()
        self.record["correctness_s"] = time.perf_counter() - t0
        if job.timing.enabled:
            baselines.check(self)       # the job's baselines right before they are timed (rank/baselines.py)
            time_size(self, expected)
        return self.record

    def trials(self) -> Any:
        c, job, size = self.c, self.job, self.size
        expected = lent = None
        for trial in range(int(job.trials)):
            phase = f"size {size}, trial {trial}"
            c.files.heartbeat(f"{phase}, inputs")
            inputs = c.make_inputs(size, f"trial{trial}", turn=trial)
            if lent is None:
                lent = self.lend([inputs])
            else:
                compare.refill(lent[0], inputs)
                c.sync()
            pristine = compare.clone(inputs)
            first = trial == 0
            c.files.heartbeat(f"{phase}, candidate call {SETUP_MARK}" if first else f"{phase}, candidate call")
            window = self.link.batch([0], first=first, spin=self.spin, barrier=(lambda: None) if first else c.barrier,
                                     timeout=c.batch_timeout(), inputs=job.inplace)
            outs = self.inspect(window, [0], phase, first)
            cand_in = self.inputs_after(window, 0, lent[0])
            if first:    # ranks meet on the store before the next collective (the short timeout is back)
                c.files.heartbeat(f"{phase}, waiting for peers {SETUP_MARK}")
                c.store_barrier(f"first/{phase}", c.batch_timeout(), "finish their first call of the size")
            ref_in = compare.clone(pristine)
            expected = c.call_reference(ref_in, phase)
            category, msg = self.verdict_now or (None, None)
            err = 0.0
            if category is None:
                category, msg, err = checks.check_call(outs[0], expected, cand_in, ref_in, pristine, job.tolerance,
                                                       job.inplace, getattr(c.harness, "check", None))
            self.held += [r for spans in window.spans for r in spans]
            self.verdict({"trial": trial, "category": category, "message": msg, "max_abs_err": err}, phase)
        self.link.release()
        self.held = []
        return expected

    def verdict(self, mine: dict, phase: str) -> None:
        everyone = self.c.agree(mine)
        self.record["trials"].append({"trial": mine["trial"], "max_abs_err": max(v["max_abs_err"] for v in everyone),
                                      "ok": not any(v["category"] for v in everyone)})
        self.fail_if_any(everyone, phase)

    def fail_if_any(self, everyone: list, phase: str) -> None:
        bad = [(r, v) for r, v in enumerate(everyone) if v["category"]]
        if bad:
            r, v = bad[0]
            raise AgreedFailure({"category": v["category"], "rank": r, "phase": phase,
                                 "message": f"rank {r}, {phase}: {v['message']}"}, self.record)

    # ---- timing ----------------------------------------------------------------------------------
def _calls(counts: dict) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))


def _failed(category: str, message: str, tb: str) -> Exception:
    from .failures import ItemFailed
    return ItemFailed(category, message, "candidate", tb=tb)


def _takes_nodes(fn: Any) -> bool:
    import inspect
    try:
        return "nodes" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
