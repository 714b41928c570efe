"""The oracle self-test's kernels, generated from each problem's own reference (run inside the
ranks of bench/oracle_audit.py, on gloo): planted wrong kernels that the checker must fail, and
honest kernels that reduce in another order or precision that it must pass.

Every kernel is the reference called on some inputs, then transformed; the verdict is the
checker's own (pytest_kernelbench.rank.checks.check_call: structure, values with the problem's
tolerance or its harness check(), in-place results, untouched inputs). No kernel is hand-written
per problem, so a new problem folder is covered as soon as its reference runs on gloo.

Planted (each must fail where it changes the output at all; where it leaves every judged rank's
result bit for bit the reference's, it is honest for that problem and reads "n/a"):
- skip_rank: rank r's contribution dropped (the reference with r's float inputs zeroed), judged on
  the other ranks; r is the last rank, else rank 0 where the last rank's inputs do not matter.
- stale: every rank returns the previous call's result (the reference on the previous input set).
- missing_barrier: rank p's own inputs fresh, its peers' from the previous call (a read of a peer
  buffer before the peer wrote the new values), judged on rank p; p is rank 0, else the last rank
  where rank 0's result does not depend on its peers.
- wrong_peer: rank q returns rank q+1's result (blocks delivered to the wrong peer).
- half: the second half of every output (and of every in-place updated input) zeroed.
Honest (each must pass on every reduction problem):
- honest_reorder: every reducing collective (all_reduce, reduce_scatter_tensor, reduce) replaced
  by a gather and a float32 (float64 for float32 data) sum in reversed rank order, rounded once.
- honest_native: those collectives summing in rank order in the data's dtype, rounded at every
  step (a ring that accumulates in bfloat16, as NCCL's does).
- honest_fp32: the whole reference on float32 copies of the half-width float inputs (float64 for
  float32 ones), results rounded once to their dtype: a kernel that accumulates everything wide.
- fp32_vs_native: honest_fp32 judged against the reference run as honest_native (the GPU's
  reference sums in NCCL's order, not gloo's): the widest spread of two honest orders.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from pytest_kernelbench.rank import compare

PLANTED = ("skip_rank", "stale", "missing_barrier", "wrong_peer", "half")
HONEST = ("honest_reorder", "honest_native", "honest_fp32")
_WIDE = {torch.bfloat16: torch.float32, torch.float16: torch.float32, torch.float32: torch.float64}


def tmap(obj: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """`obj` with fn applied to every tensor leaf of its tuples, lists and dicts."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, (tuple, list)):
        items = [tmap(v, fn) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, dict):
        return {k: tmap(v, fn) for k, v in obj.items()}
    return obj


def tzip(a: Any, b: Any, fn: Callable[[torch.Tensor, Any], Any]) -> Any:
    """`a` with fn(a_leaf, b_leaf) at every tensor leaf (b has a's structure)."""
    if isinstance(a, torch.Tensor):
        return fn(a, b)
    if isinstance(a, (tuple, list)):
        return type(a)(tzip(x, y, fn) for x, y in zip(a, b))
    if isinstance(a, dict):
        return {k: tzip(a[k], b[k], fn) for k in a}
    return a


def scalable(t: torch.Tensor) -> bool:
    """A floating tensor arithmetic runs on (not an fp8 one: data to move, not to scale)."""
    return t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def scaled(inputs: Any, s: float) -> Any:
    """Every floating input tensor times s (integer and fp8 data, Python numbers, modules unchanged)."""
    return tmap(inputs, lambda t: t * s if scalable(t) else t)


def zeroed(inputs: Any) -> Any:
    """The floating inputs zeroed; all of them where none is floating (a rank of counts or indices)."""
    floats = [t for _, t in compare.leaves(inputs) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return tmap(inputs, lambda t: torch.zeros_like(t) if t.is_floating_point() or not floats else t.clone())


def widened(inputs: Any, dtype: torch.dtype) -> Any:
    """Half-width float inputs as float32; float32 ones as float64 only where float32 is the problem's
    dtype (a bfloat16 problem's float32 inputs meet buffers its reference makes in float32)."""
    wide = {k: v for k, v in _WIDE.items() if k != torch.float32 or dtype == torch.float32}
    return tmap(inputs, lambda t: t.to(wide[t.dtype]) if t.dtype in wide else t.clone())


def changed(after: Any, before: Any) -> Any:
    """Per input tensor leaf: whether the call changed it (an in-place problem's results)."""
    return tzip(after, before, lambda a, b: not compare._same_bits(a, b))


def _is_fp8(t: torch.Tensor) -> bool:
    return t.dtype.is_floating_point and t.element_size() == 1


def half_zeroed(t: torch.Tensor) -> torch.Tensor:
    # a contiguous copy: reshape(-1) of a non-contiguous clone is a copy, and zeroing it changed
    # nothing (p2p/linear_attn_cp_state_scan's output read "n/a" for a half that was never zeroed)
    t = t.clone(memory_format=torch.contiguous_format)
    t.view(-1)[t.numel() // 2:] = 0
    return t


# ---- honest reduction orders ----------------------------------------------------------------
class _Done:
    """The Work of an already finished call (async_op=True callers wait on it)."""

    def wait(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _gathered(t: torch.Tensor, group: Any) -> list[torch.Tensor]:
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    _ORIG["all_gather"](parts, t.contiguous(), group=group)
    return parts


_ORDER = {"wide": True}       # how the patched collectives combine: reversed and wide, or forward in the dtype


def _combine(parts: list[torch.Tensor], op: Any) -> torch.Tensor:
    """The parts combined in reversed rank order accumulated wide (rounded once), or in rank order
    rounded to their dtype at every step (a ring that accumulates in bfloat16, as NCCL's does)."""
    wide = _WIDE.get(parts[0].dtype, parts[0].dtype) if _ORDER["wide"] else parts[0].dtype
    parts = list(reversed(parts)) if _ORDER["wide"] else parts
    acc = parts[0].to(wide)
    for p in parts[1:]:
        p = p.to(wide)
        acc = torch.maximum(acc, p) if op == dist.ReduceOp.MAX else torch.minimum(acc, p) \
            if op == dist.ReduceOp.MIN else acc * p if op == dist.ReduceOp.PRODUCT else acc + p
    if op == dist.ReduceOp.AVG:
        acc = acc / len(parts)
    return acc.to(parts[0].dtype)


def _all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
    tensor.copy_(_combine(_gathered(tensor, group), op))
    return _Done() if async_op else None


def _reduce(tensor, dst=None, op=dist.ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    result = _combine(_gathered(tensor, group), op)
    root = group_dst if group_dst is not None else dist.get_group_rank(group, dst) if group is not None else dst
    if dist.get_rank(group) == root:
        tensor.copy_(result)
    return _Done() if async_op else None


def _reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
    full = _combine(_gathered(input, group), op)
    output.copy_(full.reshape(dist.get_world_size(group), *output.shape)[dist.get_rank(group)])
    return _Done() if async_op else None


def _reduce_scatter(output, input_list, op=dist.ReduceOp.SUM, group=None, async_op=False):
    mine = dist.get_rank(group)
    for i, chunk in enumerate(input_list):      # one gather per destination, in the same order on every rank
        result = _combine(_gathered(chunk, group), op)
        if i == mine:
            output.copy_(result)
    return _Done() if async_op else None


_ORIG: dict[str, Callable] = {}
_PATCHES = {"all_reduce": _all_reduce, "reduce": _reduce, "reduce_scatter_tensor": _reduce_scatter_tensor,
            "reduce_scatter": _reduce_scatter}


@contextlib.contextmanager
def reordered(wide: bool = True) -> Iterator[None]:
    """torch.distributed's reducing collectives replaced by another order (_combine)."""
    _ORDER["wide"] = wide
    _ORIG.update(all_gather=dist.all_gather, **{k: getattr(dist, k) for k in _PATCHES})
    for k, fn in _PATCHES.items():
        setattr(dist, k, fn)
    try:
        yield
    finally:
        for k in _PATCHES:
            setattr(dist, k, _ORIG[k])


# ---- the kernels ----------------------------------------------------------------------------
def run_reference(reference: Any, inputs: Any) -> tuple[Any, Any]:
    """(output, inputs after the call) of the reference on a copy of `inputs`."""
    args = compare.clone(inputs)
    out = reference.solution(*args)
    return out, args


def planted(kind: str, reference: Any, fresh: Any, previous: Any, expected: tuple[Any, Any], rank: int, world: int,
            mutated: Any) -> tuple[tuple[Any, Any], list[int]]:
    """((output, inputs after the call), judged ranks) of a planted wrong kernel. Every rank makes
    the same reference calls in the same order (the calls are collective)."""
    if kind == "stale":
        return run_reference(reference, previous), list(range(world))
    if kind.startswith("missing_barrier"):      # missing_barrier<p>: rank p's view
        p = int(kind.removeprefix("missing_barrier"))
        return run_reference(reference, fresh if rank == p else previous), [p]
    if kind == "skip_rank":
        raise ValueError("skip_rank is run by skip_rank_kernels (two candidate ranks)")
    if kind == "half":
        out, after = expected
        return (tmap(out, half_zeroed), tzip(after, mutated, lambda t, m: half_zeroed(t) if m else t)), \
            list(range(world))
    if kind == "wrong_peer":
        everyone: list = [None] * world
        # fp8 tensors do not pickle: sent as their bytes, read back as this rank's dtypes
        dist.all_gather_object(everyone, tmap(expected, lambda t: t.view(torch.uint8) if _is_fp8(t) else t))
        peer = everyone[(rank + 1) % world]
        try:        # the peer's result may have another structure (a dict with other keys): left as sent
            peer = tzip(peer, expected, lambda t, e: t.view(e.dtype) if isinstance(e, torch.Tensor) and _is_fp8(e) else t)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            pass
        peer_out, peer_after = peer
        after = expected[1]
        if any(m for _, m in compare.leaves(mutated)):      # an in-place problem: the peer's updated inputs
            after = tzip(after, tzip(peer_after, mutated, lambda p, m: (p, m)), lambda t, pm: pm[0] if pm[1] else t)
        return (peer_out, after), list(range(world))
    raise ValueError(kind)


def skip_rank_kernels(reference: Any, fresh: Any, rank: int, world: int) -> list[tuple[int, tuple[Any, Any]]]:
    """(r, result) for r = the last rank and rank 0: the reference with rank r's floats zeroed."""
    return [(r, run_reference(reference, zeroed(fresh) if rank == r else fresh)) for r in dict.fromkeys((world - 1, 0))]


def honest(kind: str, reference: Any, fresh: Any, expected: tuple[Any, Any], dtype: torch.dtype) -> tuple[Any, Any]:
    if kind in ("honest_reorder", "honest_native"):
        with reordered(wide=kind == "honest_reorder"):
            return run_reference(reference, fresh)
    if kind == "honest_fp32":
        out, after = run_reference(reference, widened(fresh, dtype))
        # rounded once, to the dtypes the reference returns and the inputs have
        def back(t: torch.Tensor, like: Any) -> Any:
            return t.to(like.dtype) if isinstance(like, torch.Tensor) and t.dtype != like.dtype else t
        return tzip(out, expected[0], back), tzip(after, fresh, back)
    raise ValueError(kind)
