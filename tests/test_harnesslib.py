"""harnesslib.exact_values: the fast rounding gives the scaled form's values for every input."""
from __future__ import annotations

import pytest
import torch

from pytest_kernelbench.harnesslib import GRID_SCALES, exact_values, grid_drawn, grid_round_


def scaled(x: torch.Tensor, step: float, lim: float) -> torch.Tensor:
    """The plain form: scale to the grid, round (ties to even), clamp, scale back."""
    k = lim / step
    return x.mul(1 / step).round_().clamp_(-k, k).mul_(step)


def every_value(dtype: torch.dtype) -> torch.Tensor:
    """Every finite value of a 16-bit float type, from its bit patterns."""
    x = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(dtype)
    return x[torch.isfinite(x)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("step,lim", [(0.125, 4.0), (0.125, 2.0), (0.25, 8.0), (2.0 ** -6, 0.5), (0.125, 32.0)])
def test_grid_round_matches_the_scaled_form_on_every_value(dtype, step, lim):
    x = every_value(dtype)
    want = scaled(x, step, lim)
    got = grid_round_(x.clone(), step, lim)
    assert torch.equal(got, want)        # as values: +0 and -0 are equal
    assert got.abs().max() <= lim
    assert torch.equal(torch.remainder(got.float(), step), torch.zeros_like(got.float()))


def test_grid_round_breaks_ties_to_even():
    x = torch.tensor([0.0625, 0.1875, -0.0625, -0.1875, 3.9375, 4.0625, -4.0625], dtype=torch.bfloat16)
    assert grid_round_(x, 0.125, 4.0).tolist() == [0.0, 0.25, 0.0, -0.25, 4.0, 4.0, -4.0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_exact_values_draws_what_it_drew_before(dtype):
    """The same generator state gives the values the scaled form gave from the same draw."""
    gen = torch.Generator().manual_seed(7)
    got = exact_values((1 << 16,), gen, "cpu", dtype, shift=0.25)
    gen.manual_seed(7)
    want = scaled(torch.randn((1 << 16,), generator=gen, dtype=dtype).add_(0.25), 0.125, 4.0)
    assert torch.equal(got, want)
    assert got.float().std() > 0.8         # still roughly N(shift, 1), not a constant


def test_grid_drawn_scales_the_grid_and_keeps_sums_exact():
    """Issue 44, class 7: each scale a checker's set may draw keeps any order of summing 8 ranks'
    values exact in bfloat16, and every scale is drawn (the set's seed picks it)."""
    drawn = set()
    for seed in range(64):
        with grid_drawn(seed << 16) as scale:
            drawn.add(scale)
            ranks = torch.stack([exact_values((4096,), torch.Generator().manual_seed(r), "cpu", torch.bfloat16)
                                 for r in range(8)])
        assert torch.equal(torch.remainder(ranks.float(), 0.125 * scale), torch.zeros_like(ranks.float()))
        assert ranks.abs().max() <= 4 * scale and ranks.float().std() > 0.8 * scale
        exact = ranks.double().sum(0)
        ring = ranks[0]
        for r in range(1, 8):       # bf16 rounding at every step, in two orders
            ring = ring + ranks[r]
        back = ranks[7]
        for r in range(6, -1, -1):
            back = back + ranks[r]
        assert torch.equal(ring.double(), exact) and torch.equal(back.double(), exact)
    assert drawn == set(GRID_SCALES)
    with grid_drawn(0):
        pass
    x = exact_values((4096,), torch.Generator().manual_seed(0), "cpu", torch.bfloat16)
    assert torch.equal(torch.remainder(x.float(), 0.125), torch.zeros_like(x.float()))   # outside a draw: as before


def test_a_one_byte_code_fixed_in_advance_fails_one_of_two_trials():
    """The cheat the scales are for: the values times 2^k in a byte decode the sets of a few
    neighbouring scales exactly (int8 codes of the 1/8 grid: scale 1 and 2), but a size's trials 0
    and 1 (turns 0 and 1) take scales three apart, so whatever the job's draw, one of them fails."""
    def decodes(x: torch.Tensor, k: int) -> bool:
        code = (x.float() * 2 ** k).round().clamp(-128, 127).to(torch.int8)
        return torch.equal((code.float() / 2 ** k).to(torch.bfloat16), x)

    for base in range(len(GRID_SCALES)):
        sets = []
        for turn in (0, 1):
            with grid_drawn(base << 16, turn):
                sets.append(exact_values((4096,), torch.Generator().manual_seed(turn), "cpu", torch.bfloat16))
        for k in range(-2, 10):
            assert not (decodes(sets[0], k) and decodes(sets[1], k)), (base, k)
        with grid_drawn(base << 16) as scale:
            if scale == 1.0:
                assert decodes(sets[0], 3)        # the cheat's code is exact at scale 1, as on 4eecbbc
