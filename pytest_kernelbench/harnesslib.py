"""Helpers for problems' harness.py files (trusted code, run inside the ranks). Shared logic
lives here once instead of being pasted into problem folders."""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

# significant bits (the implicit one included) of the half-width float types
_SIGNIFICANT_BITS = {torch.bfloat16: 8, torch.float16: 11}


def exact_values(shape: Sequence[int], gen: torch.Generator, device: torch.device | str, dtype: torch.dtype, step: float = 0.125, lim: float = 4.0,
                 shift: float = 0.0) -> torch.Tensor:
    """Roughly N(shift, 1) values rounded to multiples of `step` and clamped to [-lim, lim].

    With the defaults every partial sum of up to 8 such values is a multiple of 1/8 below 32 in
    magnitude, hence exact in bfloat16: any reduction order (ring, tree, one-shot, fp32
    accumulation) gives identical bits, so a correct candidate never fails by rounding while a
    missing or doubled contribution, or an fp8 downcast, still does.
    """
    k = lim / step
    bits = _SIGNIFICANT_BITS.get(dtype, 0)
    if bits and k == int(k) and k <= 256 and math.frexp(step)[0] == 0.5:
        # the grid (a power-of-two step, at most 256 steps a side) is exact in dtype: draw and round
        # there, in a third of the memory traffic of float32 (the checker makes fresh inputs every
        # timed round, up to 64 sets)
        x = torch.randn(shape, generator=gen, device=device, dtype=dtype)
        if shift:
            x = x.add_(shift)
        return grid_round_(x, step, lim)
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    if shift:
        x = x.add_(shift)      # N(shift, 1) before rounding
    return x.div_(step).round_().clamp_(-k, k).mul_(step).to(dtype)


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
