"""rank.compare: values, structure, aliasing, unchanged inputs and distinct outputs."""
from __future__ import annotations

import pytest
import torch

from pytest_kernelbench.rank import compare


def test_compare_names_position_and_error():
    exp = torch.zeros(4, 3)
    out = exp.clone()
    out[2, 1] = 0.5
    msg, err = compare.values(out, exp, {"atol": 1e-3, "rtol": 0})
    assert "first at [2, 1]" in msg and err == pytest.approx(0.5)
    assert compare.values(exp.clone(), exp, {"atol": 0, "rtol": 0})[0] is None


def test_compare_structure_type_shape_dtype_nan():
    e = torch.ones(3)
    assert "expected shape" in compare.structure(torch.ones(4), e)
    assert "dtype" in compare.structure(torch.ones(3, dtype=torch.float64), e)
    assert "expected 2 items" in compare.structure((e,), (e, e))

    class Lazy(torch.Tensor):
        pass
    assert "expected a torch.Tensor" in compare.structure(torch.ones(3).as_subclass(Lazy), e)
    nan = torch.ones(3)
    nan[1] = float("nan")
    assert "NaN/Inf" in compare.values(nan, e, {"atol": 1, "rtol": 1})[0]
    assert compare.values(torch.tensor([1, 2]), torch.tensor([1, 3]), {"atol": 5, "rtol": 5})[0]  # ints are exact


def test_aliasing_unchanged_and_distinct():
    x = torch.arange(6.0)
    assert "shares memory" in compare.aliasing(x[2:], (x,))
    assert compare.aliasing(x.clone(), (x,)) is None
    before = compare.clone((x,))
    x[0] = 9
    assert "modified" in compare.unchanged((x,), before)
    buf = torch.ones(3)
    assert "persistent buffer" in compare.distinct([buf, buf])
