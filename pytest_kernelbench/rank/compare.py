"""Compare a candidate's outputs with the reference's: structure, type, shape, dtype, NaN/Inf,
tolerance; and the contract around them (inputs untouched, outputs not aliasing inputs).

Every function returns None when fine, else one readable line saying what and where.
"""
from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import torch


def leaves(obj: Any, prefix: str = "out"):
    """(path, value) for every leaf of a nested tuple/list/dict structure."""
    if isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            yield from leaves(v, f"{prefix}[{i}]")
    elif isinstance(obj, dict):
        for k in obj:
            yield from leaves(obj[k], f"{prefix}[{k!r}]")
    else:
        yield prefix, obj


def clone(obj: Any) -> Any:
    """Deep copy of tensors inside a nested structure; other leaves are shared."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, tuple):
        return tuple(clone(v) for v in obj)
    if isinstance(obj, list):
        return [clone(v) for v in obj]
    if isinstance(obj, dict):
        return {k: clone(v) for k, v in obj.items()}
    return obj


def refill(dst: Any, src: Any, where: str = "inputs"):
    """Copy fresh values into existing tensors (same pointers, new data)."""
    if isinstance(dst, torch.Tensor):
        if not isinstance(src, torch.Tensor) or src.shape != dst.shape or src.dtype != dst.dtype:
            raise RuntimeError(f"harness.inputs() must return the same shapes for a size and rank; {where} changed "
                               f"from {tuple(dst.shape)} to {tuple(getattr(src, 'shape', ()))}")
        dst.copy_(src)
    elif isinstance(dst, (tuple, list)):
        for i, (d, s) in enumerate(zip(dst, src)):
            refill(d, s, f"{where}[{i}]")


def structure(out: Any, expected: Any, path: str = "out") -> str | None:
    if isinstance(expected, (tuple, list)):
        if not isinstance(out, (tuple, list)):
            return f"{path}: expected a {type(expected).__name__} of {len(expected)}, got {type(out).__name__}"
        if len(out) != len(expected):
            return f"{path}: expected {len(expected)} items, got {len(out)}"
        for i, (o, e) in enumerate(zip(out, expected)):
            msg = structure(o, e, f"{path}[{i}]")
            if msg:
                return msg
        return None
    if isinstance(expected, dict):
        if not isinstance(out, dict) or set(out) != set(expected):
            return f"{path}: expected a dict with keys {sorted(expected)}, got {type(out).__name__}"
        for k in expected:
            msg = structure(out[k], expected[k], f"{path}[{k!r}]")
            if msg:
                return msg
        return None
    if isinstance(expected, torch.Tensor):
        # exact type: a lazy or wrapping tensor subclass could compute on comparison instead of in the call
        if type(out) is not torch.Tensor:
            return f"{path}: expected a torch.Tensor, got {type(out).__module__}.{type(out).__name__}"
        if out.device != expected.device:
            return f"{path}: expected a tensor on {expected.device}, got {out.device}"
        if out.shape != expected.shape:
            return f"{path}: expected shape {tuple(expected.shape)}, got {tuple(out.shape)}"
        if out.dtype != expected.dtype:
            return f"{path}: expected dtype {expected.dtype}, got {out.dtype}"
        if out.layout != torch.strided:
            return f"{path}: expected a dense tensor, got layout {out.layout}"
        return None
    if expected is None:
        return None if out is None else f"{path}: expected None, got {type(out).__name__}"
    if isinstance(expected, numbers.Number):
        if not isinstance(out, numbers.Number) or isinstance(out, bool) != isinstance(expected, bool):
            return f"{path}: expected a {type(expected).__name__}, got {type(out).__name__}"
        return None
    return None if type(out) is type(expected) else f"{path}: expected {type(expected).__name__}, got {type(out).__name__}"


def _index(flat_idx: int, shape: Sequence[int]) -> list[int]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat_idx % dim)
        flat_idx //= dim
    return list(reversed(idx))


def values(out: Any, expected: Any, tol: dict, path: str = "out") -> tuple[str | None, float]:
    """(message or None, max abs error over all outputs). Assumes structure() passed."""
    worst = 0.0
    for (p, o), (_, e) in zip(leaves(out, path), leaves(expected, path)):
        if isinstance(e, torch.Tensor):
            msg, err = _tensor_values(o, e, tol, p)
        elif isinstance(e, numbers.Number):
            err = abs(float(o) - float(e))   # type: ignore[arg-type]  # a real number (ints, floats, bools)
            bound = tol["atol"] + tol["rtol"] * abs(float(e))   # type: ignore[arg-type]
            msg = None if err <= bound or (o != o and e != e) else \
                f"{p}: expected {e!r}, got {o!r} (error {err:.3g} > {bound:.3g})"
        else:
            msg, err = (None if o == e else f"{p}: expected {e!r}, got {o!r}"), 0.0
        worst = max(worst, err)
        if msg:
            return msg, worst
    return None, worst


def _tensor_values(o: torch.Tensor, e: torch.Tensor, tol: dict, path: str):
    if e.numel() == 0:
        return None, 0.0
    if not (e.is_floating_point() or e.is_complex()):
        bad = o != e
        if bool(bad.any()):
            i = int(bad.reshape(-1).nonzero()[0])
            pos = _index(i, e.shape)
            return (f"{path}: {int(bad.sum())} of {e.numel()} values differ; first at {pos}: "
                    f"expected {e.reshape(-1)[i].item()}, got {o.reshape(-1)[i].item()}"), float("inf")
        return None, 0.0
    of, ef = o.detach().to(torch.float32), e.detach().to(torch.float32)
    e_nan, o_nan = torch.isnan(ef), torch.isnan(of)
    e_inf, o_inf = torch.isinf(ef), torch.isinf(of)
    diff = (of - ef).abs()
    bound = tol["atol"] + tol["rtol"] * ef.abs()
    bad = (diff > bound) & ~e_nan & ~e_inf
    bad |= o_nan != e_nan
    bad |= (o_inf | e_inf) & (of != ef)
    finite = ~(e_nan | e_inf | o_nan | o_inf)
    max_err = float(diff[finite].max()) if bool(finite.any()) else 0.0
    if not bool(bad.any()):
        return None, max_err
    n_bad = int(bad.sum())
    i = int(bad.reshape(-1).nonzero()[0])
    pos = _index(i, e.shape)
    got, want = of.reshape(-1)[i].item(), ef.reshape(-1)[i].item()
    kind = "NaN/Inf where the reference is finite" if bool((o_nan | o_inf)[~(e_nan | e_inf)].any()) else "values differ"
    return (f"{path}: {kind}: {n_bad} of {e.numel()} elements outside atol={tol['atol']:g} rtol={tol['rtol']:g}, "
            f"max abs error {max_err:.4g}; first at {pos}: expected {want:.6g}, got {got:.6g}"), max(max_err, abs(got - want))


def unchanged(now: Any, before: Any, path: str = "input") -> str | None:
    """Inputs after a call must equal their pristine copy bit for bit."""
    for (p, n), (_, b) in zip(leaves(now, path), leaves(before, path)):
        if isinstance(b, torch.Tensor):
            same = isinstance(n, torch.Tensor) and n.shape == b.shape and n.dtype == b.dtype and (
                bool(torch.equal(n, b)) or
                (b.is_floating_point() and bool(((n == b) | (torch.isnan(n) & torch.isnan(b))).all())))
            if not same:
                return f"{p} was modified by the candidate (this problem is not in-place)"
    return None


def differs(now: Any, before: Any, path: str = "out") -> str | None:
    """The first leaf of `now` whose bits differ from `before` (a snapshot of it), NaNs equal."""
    for (p, n), (_, b) in zip(leaves(now, path), leaves(before, path)):
        if isinstance(b, torch.Tensor) and isinstance(n, torch.Tensor):
            if n.shape != b.shape or n.dtype != b.dtype:
                return p
            if not (bool(torch.equal(n, b)) or
                    (b.is_floating_point() and bool(((n == b) | (torch.isnan(n) & torch.isnan(b))).all()))):
                return p
    return None


def storages(obj: Any) -> set[int]:
    return {v.untyped_storage().data_ptr() for _, v in leaves(obj) if isinstance(v, torch.Tensor)
            and v.untyped_storage().nbytes() > 0}


def aliasing(out: Any, inputs: Sequence[Any]) -> str | None:
    """Outputs must be fresh tensors, not views of the inputs."""
    ins = storages(inputs)
    for p, v in leaves(out):
        if isinstance(v, torch.Tensor) and v.untyped_storage().nbytes() > 0 and v.untyped_storage().data_ptr() in ins:
            return f"{p} shares memory with an input (return a fresh tensor, not a view of an input)"
    return None


def distinct(outputs: list) -> str | None:
    """Outputs kept from several calls must not share memory (a persistent buffer returned twice)."""
    seen: dict[int, int] = {}   # storage pointer -> the call that returned it
    for call, out in enumerate(outputs):
        for p, v in leaves(out):
            if isinstance(v, torch.Tensor) and v.untyped_storage().nbytes() > 0:
                ptr = v.untyped_storage().data_ptr()
                if ptr in seen and seen[ptr] != call:
                    return f"{p} of call {call} is the storage of the output of call {seen[ptr]}: the outputs " \
                           f"of different calls share storage, so the earlier result was overwritten " \
                           f"(return a fresh tensor each call, not a persistent buffer)"
                seen[ptr] = call
    return None
