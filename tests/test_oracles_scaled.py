"""harnesslib.assert_close_scaled (issue 49): a data-scaled tolerance passes every honest order of a
bfloat16 reduction at any input scale and fails a dropped rank, a zeroed half, a stale result."""
from __future__ import annotations

import pytest
import torch

from pytest_kernelbench.harnesslib import assert_close_scaled
from pytest_kernelbench.spec.problem import load_problem
from pytest_kernelbench.candidates.sections import has_own_check

W = 8


def partials(scale: float, n: int = 1 << 16, seed: int = 0) -> list[torch.Tensor]:
    """Eight ranks' GEMM-like partial sums, ~N(0, 1/W) each, rounded to bfloat16."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, generator=g) * scale / W ** 0.5).to(torch.bfloat16) for _ in range(W)]


def ring(parts: list[torch.Tensor], start: int = 0) -> torch.Tensor:
    """bfloat16 accumulation, rounded at every step, from rank `start` around the ring (NCCL's)."""
    acc = parts[start].clone()
    for k in range(1, len(parts)):
        acc = acc + parts[(start + k) % len(parts)]
    return acc


def wide(parts: list[torch.Tensor]) -> torch.Tensor:
    """float32 accumulation in reversed rank order, rounded once."""
    acc = torch.zeros_like(parts[0], dtype=torch.float32)
    for p in reversed(parts):
        acc += p.float()
    return acc.to(torch.bfloat16)


@pytest.mark.parametrize("scale", [2.0 ** -10, 1.0, 2.0 ** 10, 1e-3, 1e3])
def test_honest_orders_pass_at_every_scale(scale):
    parts = partials(scale)
    reference = ring(parts)
    for honest in (wide(parts), ring(parts, start=3), ring(parts[::-1])):
        assert_close_scaled(honest, reference, atol_rms=0.02, rtol=0.016)
        assert_close_scaled(reference, honest, atol_rms=0.02, rtol=0.016)


def test_the_plain_rule_fails_an_honest_order_where_the_scaled_one_does_not():
    """Why the rule scales: at 2^10 the dtype default's absolute atol is far below one bfloat16
    ulp of the partial sums, so an element that cancels fails an honest kernel."""
    parts = partials(2.0 ** 10)
    reference, honest = ring(parts), wide(parts)
    diff, bound = (honest.double() - reference.double()).abs(), 0.01 + 0.016 * reference.double().abs()
    assert bool((diff > bound).any())
    assert_close_scaled(honest, reference, atol_rms=0.02, rtol=0.016)


@pytest.mark.parametrize("scale", [2.0 ** -10, 1.0, 2.0 ** 10])
def test_wrong_kernels_fail_at_every_scale(scale):
    parts = partials(scale)
    reference = ring(parts)
    skip_rank = wide(parts[:-1])
    half = reference.clone()
    half[half.numel() // 2:] = 0
    stale = ring(partials(scale, seed=1))
    for wrong in (skip_rank, half, stale):
        with pytest.raises(AssertionError, match="values differ"):
            assert_close_scaled(wrong, reference, atol_rms=0.02, rtol=0.016)


def test_nan_inf_integers_and_structure():
    e = torch.tensor([1.0, float("nan"), float("inf"), 0.0])
    assert_close_scaled((e.clone(), torch.arange(3)), (e, torch.arange(3)), 0.01, 0.01)
    with pytest.raises(AssertionError, match=r"out\[0\]"):
        assert_close_scaled((torch.tensor([float("nan"), 1.0, float("inf"), 0.0]), torch.arange(3)),
                            (e, torch.arange(3)), 0.01, 0.01)
    with pytest.raises(AssertionError, match=r"out\[1\]: 1 of 3 values differ"):
        assert_close_scaled((e.clone(), torch.tensor([0, 1, 3])), (e, torch.arange(3)), 0.01, 0.01)
    with pytest.raises(AssertionError, match="expected 2, got 3"):
        assert_close_scaled([e, 3], [e, 2], 0.01, 0.01)


def test_complex_outputs_compare_by_modulus():
    e = torch.randn(64, dtype=torch.complex64, generator=torch.Generator().manual_seed(0))
    assert_close_scaled(e * (1 + 1e-4), e, 0.001, 0.0)
    with pytest.raises(AssertionError):
        assert_close_scaled(e.conj(), e, 0.001, 0.0)


def test_the_data_scaled_problems_say_so_to_models():
    """Their check() is a def (the prompt tells a model the comparison is the problem's own, which
    the task text spells out: atol times the reference's rms), and the bound is the rms one."""
    from kbrun import PROBLEMS
    for pid in ("fusion/gemm_allreduce", "fusion/gemm_reduce_scatter", "fusion/native_gemm_reduce_scatter"):
        problem = load_problem(PROBLEMS / pid / "problem.yaml", PROBLEMS)
        assert has_own_check(problem), pid
        assert "0.0625 x rms(ref)" in problem.description, pid
    e = torch.ones(4)
    assert_close_scaled(e * 4 + 0.2, e * 4, 0.06, 0.0)      # 0.06 x rms 4 = 0.24
    with pytest.raises(AssertionError, match=r"0.04 x 4, the rms"):
        assert_close_scaled(e * 4 + 0.2, e * 4, 0.04, 0.0)
