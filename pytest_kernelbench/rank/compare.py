"""Compare a candidate's outputs with the reference's: structure, type, shape, dtype, NaN/Inf,
tolerance; and the contract around them (inputs untouched, outputs not aliasing inputs).

Every function returns None when fine, else one readable line saying what and where.

Layouts: a sparse tensor (COO, CSR/CSC/BSR/BSC) is compared as its dense value, checked bit for bit
through the dense tensors it is made of (indices and values, `parts`), and refilled in place part by
part. Complex tensors are compared as complex (|out - expected| against the tolerance).

Rules stricter than ParallelKernelBench's own comparison (allclose after a cast to float, any dtype):
a message that fails only because of one of them ends with "(rule: <name>)" (protocol.RULES names
them), so that PKB-comparable numbers can be read off a report.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from ..protocol import RULES, rule_of, tagged  # noqa: F401 (rule_of, RULES: the rules' one home)
from . import objects

_COMPRESSED = {torch.sparse_csr: ("crow_indices", "col_indices"), torch.sparse_csc: ("ccol_indices", "row_indices"),
               torch.sparse_bsr: ("crow_indices", "col_indices"), torch.sparse_bsc: ("ccol_indices", "row_indices")}


def forbidden_rule(calls: Iterable[str]) -> str | None:
    """"forbidden_barrier" when every forbidden call counted is a barrier (guards.py's labels)."""
    names = list(calls)
    return "forbidden_barrier" if names and all("barrier" in n for n in names) else None


def parts(t: torch.Tensor) -> list[torch.Tensor]:
    """The strided tensors that hold `t`'s data: itself when dense; indices and values when sparse
    (what bit-for-bit checks, storage identity and in-place refills work on). Another layout is
    represented by its dense value (a copy: it has no storage of its own to compare)."""
    if t.layout == torch.strided:
        return [t]
    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    if t.layout in _COMPRESSED:
        a, b = _COMPRESSED[t.layout]
        return [getattr(t, a)(), getattr(t, b)(), t.values()]
    return [t.to_dense()]


def dense(t: torch.Tensor) -> torch.Tensor:
    return t if t.layout == torch.strided else t.to_dense()


def _storage_ptrs(t: torch.Tensor) -> list[int]:
    ptrs = []
    for p in parts(t):
        try:
            storage = p.untyped_storage()
        except (NotImplementedError, RuntimeError):     # a tensor without storage (meta, functional wrappers)
            continue
        if storage.nbytes() > 0:
            ptrs.append(storage.data_ptr())
    return ptrs


def _same_bits(n: object, b: torch.Tensor) -> bool:
    """`n` is `b` bit for bit (NaNs equal), whatever the layout."""
    if not isinstance(n, torch.Tensor) or n.shape != b.shape or n.dtype != b.dtype or n.layout != b.layout:
        return False
    pn, pb = parts(n), parts(b)
    return len(pn) == len(pb) and all(x.shape == y.shape and _equal_nan(x, y) for x, y in zip(pn, pb))


def _equal_nan(n: torch.Tensor, b: torch.Tensor) -> bool:
    if bool(torch.equal(n, b)):
        return True
    return (b.is_floating_point() or b.is_complex()) and bool(((n == b) | (torch.isnan(n) & torch.isnan(b))).all())


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


def adopt(dst: Any, src: Any) -> Any:
    """`dst` with its tensors replaced by `src`'s (already refilled into the lent copy, so the
    shapes agree) and everything else kept, as refill() keeps it: the checker's own copy of fresh
    inputs, without a copy."""
    if isinstance(dst, (torch.Tensor, torch.nn.Module)):
        return src
    if isinstance(dst, (tuple, list)):
        items = [adopt(d, s) for d, s in zip(dst, src)]
        return type(dst)(*items) if hasattr(dst, "_fields") else type(dst)(items)
    return dst


def refill(dst: Any, src: Any, where: str = "inputs", into: list | None = None):
    """Copy fresh values into existing tensors (same pointers, new data; a sparse tensor part by
    part, so its indices and values keep their storage too). `into`: the dense copies are only
    listed there, as (dst, src), for copy_all to make in one call."""
    if isinstance(dst, torch.Tensor):
        same = isinstance(src, torch.Tensor) and src.shape == dst.shape and src.dtype == dst.dtype \
            and src.layout == dst.layout
        if same and dst.layout != torch.strided:
            pd, ps = parts(dst), parts(src)
            same = len(pd) == len(ps) and all(d.shape == s.shape for d, s in zip(pd, ps))
        if not same:
            raise RuntimeError(f"harness.inputs() must return the same shapes for a size and rank; {where} changed "
                               f"from {_describe(dst)} to {_describe(src)}")
        if dst.layout == torch.strided:
            if into is None:
                dst.copy_(src)
            else:
                into.append((dst, src))
            return
        for d, s in zip(parts(dst), parts(src)):
            d.copy_(s)
        if dst.layout == torch.sparse_coo:
            dst._coalesced_(src.is_coalesced())
    elif isinstance(dst, (tuple, list)):
        for i, (d, s) in enumerate(zip(dst, src)):
            refill(d, s, f"{where}[{i}]", into)
    elif isinstance(dst, torch.nn.Module) and isinstance(src, torch.nn.Module):     # lent with its tensors
        theirs = src.state_dict(keep_vars=True)
        for name, d in dst.state_dict(keep_vars=True).items():
            if isinstance(d, torch.Tensor) and name in theirs:
                with torch.no_grad():
                    refill(d, theirs[name].detach(), f"{where}.{name}")


def copy_all(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """The copies refill(into=...) listed, in one call (a timed round refills up to 64 sets, some of
    a hundred tensors each: one launch from Python per tensor was most of a round's own cost)."""
    if not pairs:
        return
    dst, src = zip(*pairs)
    try:
        torch._foreach_copy_(list(dst), list(src))
    except (RuntimeError, AttributeError):      # whatever foreach refuses goes tensor by tensor
        for d, s in pairs:
            d.copy_(s)


def _describe(t: object) -> str:
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    shape = tuple(t.shape)
    if t.layout == torch.strided:
        return f"{shape}"
    nnz = f", {t._nnz()} stored values" if t.layout in (torch.sparse_coo, *_COMPRESSED) else ""
    return f"{shape} ({t.layout}{nnz})"


def structure(out: Any, expected: Any, path: str = "out", tol: dict | None = None) -> str | None:
    """Same type/structure, device, shape, layout and dtype as the reference's outputs. With `tol`,
    a dtype mismatch on outputs that are right once cast to the reference's dtype says so
    (rule: dtype)."""
    msg, kind = _structure(out, expected, path)
    if msg and kind == "dtype" and tol is not None and _right_after_cast(out, expected, tol, path):
        msg = tagged(msg, "dtype")
    return msg


def _right_after_cast(out: Any, expected: Any, tol: dict, path: str) -> bool:
    """The outputs pass every other check once each tensor is cast to the reference's dtype."""
    def cast(o: Any, e: Any) -> Any:
        if isinstance(e, (tuple, list)) and isinstance(o, (tuple, list)):
            return [cast(a, b) for a, b in zip(o, e)]
        if isinstance(e, dict) and isinstance(o, dict):
            return {k: cast(o[k], e.get(k)) for k in o}
        if isinstance(e, torch.Tensor) and isinstance(o, torch.Tensor) and o.dtype != e.dtype:
            return o.to(e.dtype)
        return o
    try:
        cast_out = cast(out, expected)
    except (RuntimeError, TypeError):
        return False
    return _structure(cast_out, expected, path)[0] is None and values(cast_out, expected, tol, path)[0] is None


def _structure(out: Any, expected: Any, path: str) -> tuple[str | None, str | None]:
    """(message, kind): kind is \"dtype\" when the first difference is a tensor's dtype."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(out, (tuple, list)):
            return f"{path}: expected a {type(expected).__name__} of {len(expected)}, got {type(out).__name__}", None
        if len(out) != len(expected):
            return f"{path}: expected {len(expected)} items, got {len(out)}", None
        for i, (o, e) in enumerate(zip(out, expected)):
            found = _structure(o, e, f"{path}[{i}]")
            if found[0]:
                return found
        return None, None
    if isinstance(expected, dict):
        if not isinstance(out, dict) or set(out) != set(expected):
            return f"{path}: expected a dict with keys {sorted(expected)}, got {type(out).__name__}", None
        for k in expected:
            found = _structure(out[k], expected[k], f"{path}[{k!r}]")
            if found[0]:
                return found
        return None, None
    if isinstance(expected, torch.Tensor):
        # exact type: a lazy or wrapping tensor subclass could compute on comparison instead of in the call
        if type(out) is not torch.Tensor:
            return f"{path}: expected a torch.Tensor, got {type(out).__module__}.{type(out).__name__}", None
        if out.device != expected.device:
            return f"{path}: expected a tensor on {expected.device}, got {out.device}", None
        if out.shape != expected.shape:
            return f"{path}: expected shape {tuple(expected.shape)}, got {tuple(out.shape)}", None
        if out.layout != expected.layout:
            if expected.layout == torch.strided:
                return f"{path}: expected a dense tensor, got layout {out.layout}", None
            return f"{path}: expected layout {expected.layout}, got {out.layout}", None
        if out.dtype != expected.dtype:
            return f"{path}: expected dtype {expected.dtype}, got {out.dtype}", "dtype"
        return None, None
    if expected is None:
        return (None if out is None else f"{path}: expected None, got {type(out).__name__}"), None
    if isinstance(expected, numbers.Number):
        if not isinstance(out, numbers.Number) or isinstance(out, bool) != isinstance(expected, bool):
            return f"{path}: expected a {type(expected).__name__}, got {type(out).__name__}", None
        return None, None
    return (None if type(out) is type(expected) else f"{path}: expected {type(expected).__name__}, got {type(out).__name__}"), None


def _same_value(o: Any, e: Any) -> bool:
    """A leaf that is neither tensor nor number: equal by value; a process group by its ranks (each
    process holds its own group object of the same ranks: rank/objects.py), never by identity."""
    group = objects.group_leaf(e)
    if group is not None:
        return objects.group_leaf(o) == group
    return bool(o == e)


def _index(flat_idx: int, shape: Sequence[int]) -> list[int]:
    idx = []
    for dim in reversed(shape):
        idx.append(flat_idx % dim)
        flat_idx //= dim
    return list(reversed(idx))


def values(out: Any, expected: Any, tol: dict, path: str = "out") -> tuple[str | None, float]:
    """(message or None, max abs error over all outputs). Assumes structure() passed. Integers
    must match exactly; outputs that differ only there, within the tolerance, say so (rule:
    exact_integers)."""
    msg, worst, integer = _values(out, expected, tol, path, exact_ints=True)
    if msg and integer and _values(out, expected, tol, path, exact_ints=False)[0] is None:
        msg = tagged(msg, "exact_integers")
    return msg, worst


def _values(out: Any, expected: Any, tol: dict, path: str, exact_ints: bool) -> tuple[str | None, float, bool]:
    """(message, max abs error, whether the first mismatch is an integer tensor's)."""
    worst = 0.0
    for (p, o), (_, e) in zip(leaves(out, path), leaves(expected, path)):
        if isinstance(e, torch.Tensor):
            msg, err = _tensor_values(o, e, tol, p, exact_ints)
        elif isinstance(e, numbers.Number):
            err = abs(o - e) if isinstance(e, complex) or isinstance(o, complex) \
                else abs(float(o) - float(e))   # type: ignore[arg-type]  # a real number (ints, floats, bools)
            bound = tol["atol"] + tol["rtol"] * abs(e)   # type: ignore[arg-type]
            msg = None if err <= bound or (o != o and e != e) else \
                f"{p}: expected {e!r}, got {o!r} (error {err:.3g} > {bound:.3g})"
        else:
            msg, err = (None if _same_value(o, e) else f"{p}: expected {e!r}, got {o!r}"), 0.0
        worst = max(worst, err)
        if msg:
            integer = isinstance(e, torch.Tensor) and not (e.is_floating_point() or e.is_complex())
            return msg, worst, integer
    return None, worst, False


def _tensor_values(o: torch.Tensor, e: torch.Tensor, tol: dict, path: str, exact_ints: bool = True):
    if e.numel() == 0:
        return None, 0.0
    o, e = dense(o.detach()), dense(e.detach())       # a sparse tensor is compared by its value
    # bit for bit the same is within any tolerance, in one read of each (the rule below makes
    # wide copies and ~10 passes): exact problems and bit-exact candidates; NaNs are never equal
    # here, so they take the rule below
    if o.dtype == e.dtype and o.shape == e.shape and o.device == e.device and bool(torch.equal(o, e)):
        return None, 0.0
    if not (e.is_floating_point() or e.is_complex()):
        if not exact_ints:
            return _tensor_values(o.to(torch.float64), e.to(torch.float64), tol, path)
        bad = o != e
        if bool(bad.any()):
            i = int(bad.reshape(-1).nonzero()[0])
            pos = _index(i, e.shape)
            return (f"{path}: {int(bad.sum())} of {e.numel()} values differ; first at {pos}: "
                    f"expected {e.reshape(-1)[i].item()}, got {o.reshape(-1)[i].item()}"), float("inf")
        return None, 0.0
    # complex stays complex (the imaginary part counts); real floats compare in float32 or wider
    wide = torch.complex128 if e.dtype == torch.complex128 else torch.complex64 if e.is_complex() else \
        torch.float64 if e.dtype == torch.float64 else torch.float32
    of, ef = o.to(wide), e.to(wide)
    # the common case first, in a third of the passes over memory (a timed window's checks run
    # this per checked call): every element within its bound and the largest error finite (no
    # NaN, no infinity on either side) is exactly when the full rule below finds nothing either
    diff = (of - ef).abs() if of.is_complex() else (of - ef).abs_()
    bound = ef.abs().mul_(tol["rtol"]).add_(tol["atol"])
    all_ok, max_err = torch.stack([(diff <= bound).all().to(torch.float64), diff.max().to(torch.float64)]).tolist()
    if all_ok and math.isfinite(max_err):
        return None, max_err
    del diff, bound
    e_nan, o_nan = torch.isnan(ef), torch.isnan(of)
    e_inf, o_inf = torch.isinf(ef), torch.isinf(of)
    diff = (of - ef).abs()
    bound = tol["atol"] + tol["rtol"] * ef.abs()
    bad = (diff > bound) & ~e_nan & ~e_inf
    bad |= o_nan != e_nan
    bad |= (o_inf | e_inf) & (of != ef)
    finite = ~(e_nan | e_inf | o_nan | o_inf)
    # one device sync for both facts (a timed window's checks run this per checked call)
    worst = torch.where(finite, diff, torch.zeros((), dtype=diff.dtype, device=diff.device)).max()
    max_err, any_bad = torch.stack([worst.to(torch.float64), bad.any().to(torch.float64)]).tolist()
    if not any_bad:
        return None, max_err
    n_bad = int(bad.sum())
    i = int(bad.reshape(-1).nonzero()[0])
    pos = _index(i, e.shape)
    got, want = of.reshape(-1)[i].item(), ef.reshape(-1)[i].item()
    kind = "NaN/Inf where the reference is finite" if bool((o_nan | o_inf)[~(e_nan | e_inf)].any()) else "values differ"
    return (f"{path}: {kind}: {n_bad} of {e.numel()} elements outside atol={tol['atol']:g} rtol={tol['rtol']:g}, "
            f"max abs error {max_err:.4g}; first at {pos}: expected {want:.6g}, got {got:.6g}"), max(max_err, abs(got - want))


def unchanged(now: Any, before: Any, path: str = "input") -> str | None:
    """Inputs after a call must equal their pristine copy bit for bit (a sparse one: its indices
    and values)."""
    for (p, n), (_, b) in zip(leaves(now, path), leaves(before, path)):
        if isinstance(b, torch.Tensor) and not _same_bits(n, b):
            return f"{p} was modified by the candidate (this problem is not in-place)"
    return None


def differs(now: Any, before: Any, path: str = "out") -> str | None:
    """The first leaf of `now` whose bits differ from `before` (a snapshot of it), NaNs equal."""
    for (p, n), (_, b) in zip(leaves(now, path), leaves(before, path)):
        if isinstance(b, torch.Tensor) and isinstance(n, torch.Tensor) and not _same_bits(n, b):
            return p
    return None


def storages(obj: Any) -> set[int]:
    return {ptr for _, v in leaves(obj) if isinstance(v, torch.Tensor) for ptr in _storage_ptrs(v)}


def aliasing(out: Any, inputs: Sequence[Any]) -> str | None:
    """Outputs must be fresh tensors, not views of the inputs."""
    ins = storages(inputs)
    for p, v in leaves(out):
        if isinstance(v, torch.Tensor) and any(ptr in ins for ptr in _storage_ptrs(v)):
            return f"{p} shares memory with an input (return a fresh tensor, not a view of an input)"
    return None


def distinct(outputs: list) -> str | None:
    """Outputs kept from several calls must not share memory (a persistent buffer returned twice)."""
    seen: dict[int, int] = {}   # storage pointer -> the call that returned it
    for call, out in enumerate(outputs):
        for p, v in leaves(out):
            if not isinstance(v, torch.Tensor):
                continue
            for ptr in dict.fromkeys(_storage_ptrs(v)):
                if ptr in seen and seen[ptr] != call:
                    return f"{p} of call {call} is the storage of the output of call {seen[ptr]}: the outputs " \
                           f"of different calls share storage, so the earlier result was overwritten " \
                           f"(return a fresh tensor each call, not a persistent buffer)"
                seen[ptr] = call
    return None
