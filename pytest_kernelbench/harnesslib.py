"""Helpers for problems' harness.py files (trusted code, run inside the ranks). Shared logic
lives here once instead of being pasted into problem folders."""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def exact_values(shape: Sequence[int], gen: torch.Generator, device: torch.device | str, dtype: torch.dtype, step: float = 0.125, lim: float = 4.0,
                 shift: float = 0.0) -> torch.Tensor:
    """Roughly N(shift, 1) values rounded to multiples of `step` and clamped to [-lim, lim].

    With the defaults every partial sum of up to 8 such values is a multiple of 1/8 below 32 in
    magnitude, hence exact in bfloat16: any reduction order (ring, tree, one-shot, fp32
    accumulation) gives identical bits, so a correct candidate never fails by rounding while a
    missing or doubled contribution, or an fp8 downcast, still does.
    """
    k = lim / step
    if dtype in (torch.bfloat16, torch.float16) and k == int(k) and k <= 256 and math.frexp(step)[0] == 0.5:
        # the grid (a power-of-two step, at most 256 steps a side) is exact in dtype: draw and round
        # there, in a third of the memory traffic of float32 (the checker makes fresh inputs every
        # timed round, up to 64 sets)
        x = torch.randn(shape, generator=gen, device=device, dtype=dtype)
        if shift:
            x = x.add_(shift)
        return x.mul_(1 / step).round_().clamp_(-k, k).mul_(step)
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    if shift:
        x = x.add_(shift)      # N(shift, 1) before rounding
    return x.div_(step).round_().clamp_(-k, k).mul_(step).to(dtype)
