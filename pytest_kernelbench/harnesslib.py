"""Helpers for problems' harness.py files (trusted code, run inside the ranks). Shared logic
lives here once instead of being pasted into problem folders."""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

# significant bits (the implicit one included) of the half-width float types
_SIGNIFICANT_BITS = {torch.bfloat16: 8, torch.float16: 11}
# the powers of two a set's grid is scaled by (issue 44, class 7): with one grid for every job a
# candidate could send one-byte codes of the values (exact here, wrong on the task). A code fixed in
# advance (the values times 2^k, in a byte) fits at most three neighbouring scales (a finer step
# rounds, a wider range overflows), and a size's two first trials take scales three apart (turns 0
# and 1), so it decodes one of them wrongly. A power of two keeps every sum exact; none below 1/4,
# where the bfloat16 tolerance would let an fp8 downcast pass.
GRID_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
_grid = {"scale": 1.0}      # the set being drawn (grid_drawn); 1 outside a checker's draw


@contextmanager
def grid_drawn(seed: int, turn: int = 0) -> Iterator[float]:
    """Around one set's harness.inputs() call (the checker's): exact_values' grid scaled by a power
    of two picked by `seed` (secret, drawn from the job's key, and equal on every rank and for every
    set a rank's values may meet, so the sums stay exact: one per size), moved half the scales on
    for each `turn` (a trial's number: its sets meet no other)."""
    scale = GRID_SCALES[((seed >> 16) + turn * (len(GRID_SCALES) // 2)) % len(GRID_SCALES)]
    before, _grid["scale"] = _grid["scale"], scale
    try:
        yield scale
    finally:
        _grid["scale"] = before


def exact_values(shape: Sequence[int], gen: torch.Generator, device: torch.device | str, dtype: torch.dtype, step: float = 0.125, lim: float = 4.0,
                 shift: float = 0.0) -> torch.Tensor:
    """Roughly N(shift, 1) values rounded to multiples of `step` and clamped to [-lim, lim], all
    scaled by the set's power of two (grid_drawn: 1/4 to 8 in a checker's sets, 1 elsewhere).

    With the defaults every partial sum of up to 8 such values is a multiple of the step below 256
    steps in magnitude (unscaled: of 1/8 below 32), hence exact in bfloat16: any reduction order
    (ring, tree, one-shot, fp32 accumulation) gives identical bits, so a correct candidate never
    fails by rounding while a missing or doubled contribution, or an fp8 downcast, still does.
    """
    scale = _grid["scale"]
    step, lim, shift = step * scale, lim * scale, shift * scale
    k = lim / step
    bits = _SIGNIFICANT_BITS.get(dtype, 0)
    exact_here = bits and k == int(k) and k <= 256 and math.frexp(step)[0] == 0.5
    # the grid (a power-of-two step, at most 256 steps a side) is exact in dtype: draw and round
    # there, in a third of the memory traffic of float32 (the checker makes fresh inputs every
    # timed round, up to 64 sets)
    x = _normal(shape, gen, device, dtype if exact_here else torch.float32, shift, scale)
    if exact_here:
        return grid_round_(x, step, lim)
    return x.div_(step).round_().clamp_(-k, k).mul_(step).to(dtype)


def _normal(shape: Sequence[int], gen: torch.Generator, device: torch.device | str, dtype: torch.dtype, mean: float,
            std: float) -> torch.Tensor:
    """N(mean, std) in one pass (unscaled: randn, the draw the values always came from)."""
    if std != 1.0:
        return torch.normal(mean, std, tuple(shape), generator=gen, device=device, dtype=dtype)
    x = torch.randn(shape, generator=gen, device=device, dtype=dtype)
    return x.add_(mean) if mean else x


def grid_round_(x: torch.Tensor, step: float, lim: float) -> torch.Tensor:
    """`x` (bfloat16 or float16) rounded in place to multiples of `step` (a power of two), ties to
    even, and clamped to [-lim, lim] (at most 256 steps a side): scaled, rounded and scaled back;
    where every sum stays in one binade (k <= 2^(bits - 2)), the same values in one pass fewer,
    clamped first and rounded by adding and taking away 1.5 * 2^e, where the dtype's spacing is
    `step` (a correctly rounded sum breaks ties to even as round() does; zeros come out +0)."""
    k = lim / step
    bits = _SIGNIFICANT_BITS[x.dtype]
    if k > 2 ** (bits - 2):
        return x.mul_(1 / step).round_().clamp_(-k, k).mul_(step)
    magic = 1.5 * step * 2 ** (bits - 1)
    return x.clamp_(-lim, lim).add_(magic).sub_(magic)


def _leaves(obj: object, path: str) -> Iterator[tuple[str, object]]:
    if isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            yield from _leaves(v, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for k in obj:
            yield from _leaves(obj[k], f"{path}[{k!r}]")
    else:
        yield path, obj


def assert_close_scaled(out: object, expected: object, atol_rms: float, rtol: float, path: str = "out") -> None:
    """Raise AssertionError unless every floating tensor of `out` is within atol_rms x rms(its
    reference tensor) + rtol x |reference| of `expected`, element-wise (NaN where the reference
    has NaN, the same infinities; integer tensors and other leaves exactly equal). The bound
    follows the data: a reduction's rounding grows with the magnitude of what is summed, not with
    each element's (an element that cancels to ~0 keeps the rounding of its large partial sums),
    and inputs 1000 times smaller or larger keep the same verdict. The checker has checked the
    structure (types, shapes, dtypes) before a harness's check() runs. A harness reads problem.yaml's
    tolerance this way with (a def, so that the prompt says the problem has its own comparison):

        def check(out, expected, inputs, tol):
            assert_close_scaled(out, expected, tol["atol"], tol["rtol"])
    """
    for (p, o), (_, e) in zip(_leaves(out, path), _leaves(expected, path)):
        if not isinstance(e, torch.Tensor):
            if o != e and not (o != o and e != e):
                raise AssertionError(f"{p}: expected {e!r}, got {o!r}")
            continue
        if not isinstance(o, torch.Tensor):
            raise AssertionError(f"{p}: expected a tensor, got {type(o).__name__}")
        o, e = o.detach(), e.detach()
        if not (e.is_floating_point() or e.is_complex()):
            bad = o != e
            if bool(bad.any()):
                i = int(bad.reshape(-1).nonzero()[0])
                raise AssertionError(f"{p}: {int(bad.sum())} of {e.numel()} values differ; first at flat index {i}: "
                                     f"expected {e.reshape(-1)[i].item()}, got {o.reshape(-1)[i].item()}")
            continue
        # float32 or wider, as the checker compares (a float64 copy of a GPU-sized output is 4x its bytes)
        wide = e.dtype if e.dtype in (torch.float64, torch.complex128) else \
            torch.complex64 if e.is_complex() else torch.float32
        of, ef = o.to(wide), e.to(wide)
        mag = ef.abs()
        finite = torch.isfinite(mag)
        rms = float(mag[finite].square().mean(dtype=torch.float64).sqrt()) if bool(finite.any()) else 0.0
        atol = atol_rms * rms
        bad = ~((of - ef).abs() <= atol + rtol * mag)      # NaN on either side compares False
        bad &= ~(torch.isnan(of) & torch.isnan(ef))
        bad &= ~(torch.isinf(ef) & (of == ef))
        if bool(bad.any()):
            i = int(bad.reshape(-1).nonzero()[0])
            err = (of - ef).abs()[finite & torch.isfinite(of.abs())]
            worst = float(err.max()) if err.numel() else float("nan")
            raise AssertionError(
                f"{p}: values differ: {int(bad.sum())} of {e.numel()} elements outside atol={atol:.4g} "
                f"({atol_rms:g} x {rms:.4g}, the rms of the reference's {p}) rtol={rtol:g}, max abs error {worst:.4g}; "
                f"first at flat index {i}: expected {ef.reshape(-1)[i].item():.6g}, got {of.reshape(-1)[i].item():.6g}")


def rank_hit_probability(experts: int, topk: int, world_size: int) -> float:
    """The probability that a token routed uniformly to `topk` of `experts` experts (experts split
    evenly over the ranks) has at least one of them on a given rank: the share of tokens a rank
    sends to each other rank in an expert-parallel dispatch (the MoE problems' cost())."""
    per_rank = experts // world_size
    return 1.0 - math.comb(experts - per_rank, topk) / math.comb(experts, topk)
