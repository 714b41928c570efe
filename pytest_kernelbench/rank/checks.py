"""The checks of candidate calls, as plain functions of what they compare (no process group, no
files), so that they run and are tested in-process:

- `check_call`: one candidate call against the reference on the same inputs (structure, values
  or the harness's own check, in-place results, untouched inputs, no aliasing);
- `check_reuse`: outputs of different calls that share storage (a persistent buffer returned
  again: earlier "outputs" were overwritten behind the caller's back);
- `after_timing`: the anti-caching passes over the refilled timing buffers.

Each returns None when fine, else a verdict {"category": ..., "message": ...} (check_call also
the max abs error), worded for a person (and a model) to act on.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..protocol import Failure
from . import compare

Verdict = dict


def check_call(out: Any, expected: Any, cand_in: tuple, ref_in: tuple, pristine: tuple, tolerance: dict, inplace: bool,
               harness_check: Callable | None = None) -> tuple[str | None, str | None, float]:
    """(category, message, max abs error) of one candidate call against the reference."""
    msg = compare.structure(out, expected, tol=tolerance)
    err = 0.0
    if msg is None and harness_check is not None:
        try:
            harness_check(out, expected, cand_in, dict(tolerance))
        except AssertionError as e:
            msg = f"{e}"
    elif msg is None:
        msg, err = compare.values(out, expected, tolerance)
    if msg is None and inplace:
        msg, _ = compare.values(cand_in, ref_in, tolerance, "input")
        msg = msg and f"in-place result wrong: {msg}"
    elif msg is None:
        msg = compare.unchanged(cand_in, pristine) or compare.aliasing(out, cand_in)
    return (Failure.MISMATCH if msg else None), msg, err


def check_reuse(earlier_outputs: list, out: Any, inplace: bool) -> str | None:
    """Earlier outputs are held alive by the caller: one storage returned again is a reused buffer."""
    if inplace:
        return None
    return compare.distinct([*earlier_outputs, out])


def after_timing(sets: list, call_candidate: Callable, call_reference: Callable, refill_all: Callable,
                 refill_some: Callable, tolerance: dict, inplace: bool,
                 harness_check: Callable | None = None) -> Verdict | None:
    """Refill the timing buffers (same pointers, new values) and check every output: a cache keyed
    on pointer, id or shape now returns stale data. Then a second pass in which only some ranks
    get new values (refill_some): an answer memoized on this rank's own input is stale too, since
    the expected result also depends on the other ranks' inputs. The candidate runs on every set
    before any reference call (no reference output exists while it runs), and every rank makes
    the same calls whatever it finds, so collectives stay matched across ranks."""
    found = None
    for pass_no, refill in ((1, refill_all), (2, refill_some)):
        refill()
        pristine = [compare.clone(s) for s in sets]
        outs = [call_candidate(s) for s in sets]
        # before the values: with one buffer returned by every call, all but the last set's
        # outputs were overwritten, which would read as "values differ"
        shared = None if (found or inplace) else compare.distinct(outs)
        if shared:
            found = {"category": Failure.MISMATCH, "message": f"calls on the timing input sets: {shared}"}
        for k, (out, s, pr) in enumerate(zip(outs, sets, pristine)):
            ref_in = compare.clone(pr)
            exp = call_reference(ref_in)
            if found is None:
                category, msg, _ = check_call(out, exp, s, ref_in, pr, tolerance, inplace, harness_check)
                if category:
                    which = " (new values on some ranks only)" if pass_no == 2 else ""
                    found = {"category": category, "message": f"input set {k}{which}: {msg}"}
            del exp, ref_in
        del outs, pristine
    return found


def shared_storage(spans: list[list[tuple[int, int]]], arenas: list[tuple[int, int]], held: list[tuple[int, int]],
                   inplace: bool) -> str | None:
    """A window's described outputs (per call, its tensors' bytes: outputs.expand) that share memory
    with another call's (held: outputs of earlier calls still alive) or with a lent input
    (`arenas`: where the candidate mapped them); an in-place call may return the inputs it changed."""
    mine = []
    for call, ranges in enumerate(spans):
        for start, end in ranges:
            if any(a < end and start < b for a, b in arenas):
                if inplace:
                    continue
                return "an output shares memory with an input (return a fresh tensor, not a view of an input)"
            mine.append((start, end, call))
    if inplace:     # calls on one input set return the same (updated) inputs
        return None
    reach, owner = -1, None          # a sweep: the furthest end so far, and whose it is
    for start, end, call in sorted(mine + [(s, e, -1) for s, e in held]):
        if start < reach and call != owner:
            return ("the outputs of different calls share storage, so an earlier result was overwritten "
                    "(return a fresh tensor each call, not a persistent buffer)")
        if end > reach:
            reach, owner = end, call
    return None
