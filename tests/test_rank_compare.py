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


def test_adopt_takes_the_fresh_tensors_and_modules_and_keeps_what_refill_keeps():
    # the checker's own copy of a refilled timing set: the fresh values without a copy, and the same
    # structure refill() leaves the lent copy with (scalars and dicts stay as lent)
    import collections

    Pair = collections.namedtuple("Pair", "a b")
    old_lin, new_lin = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    old = (torch.zeros(2), [torch.zeros(1), 3], {"k": torch.zeros(1)}, Pair(torch.zeros(1), 7), old_lin)
    new = (torch.ones(2), [torch.ones(1), 4], {"k": torch.ones(1)}, Pair(torch.ones(1), 8), new_lin)
    got = compare.adopt(old, new)
    assert got[0] is new[0] and got[1][0] is new[1][0] and got[1][1] == 3
    assert got[2] is old[2]
    assert isinstance(got[3], Pair) and got[3].a is new[3].a and got[3].b == 7
    assert got[4] is new_lin


def test_refill_copies_a_modules_tensors_in_place():
    lent, fresh = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    ptr = lent.weight.data_ptr()
    compare.refill([lent], [fresh])
    assert lent.weight.data_ptr() == ptr and torch.equal(lent.weight, fresh.weight) and torch.equal(lent.bias, fresh.bias)


def _full_rule(o: torch.Tensor, e: torch.Tensor, tol: dict) -> tuple[bool, float]:
    """The comparison rule spelled out element by element (NaN where the reference has NaN, the
    same infinity where it has one, else |o - e| <= atol + rtol |e|) and the largest finite error."""
    wide = torch.complex128 if e.is_complex() else torch.float64
    of, ef = o.to(wide), e.to(wide)
    e_nan, o_nan, e_inf, o_inf = ef.isnan(), of.isnan(), ef.isinf(), of.isinf()
    diff = (of - ef).abs()
    bad = ((diff > tol["atol"] + tol["rtol"] * ef.abs()) & ~e_nan & ~e_inf) | (o_nan != e_nan) \
        | ((o_inf | e_inf) & (of != ef))
    finite = ~(e_nan | e_inf | o_nan | o_inf)
    return bool(bad.any()), float(diff[finite].max()) if bool(finite.any()) else 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.complex64])
def test_the_fast_path_of_values_decides_as_the_full_rule(dtype):
    """values() first checks |o - e| <= bound in few passes and only then runs the full rule: on
    every mix of close, far, NaN and infinite elements it decides as the full rule does."""
    tol = {"atol": 1e-2, "rtol": 1e-2}
    g = torch.Generator().manual_seed(0)
    specials = [0.0, float("nan"), float("inf"), -float("inf")]
    for case in range(300):
        e = torch.randn(8, generator=g).to(dtype)
        o = e.clone()
        kind = case % 6
        i = int(torch.randint(8, (1,), generator=g))
        if kind == 1:
            o[i] = o[i] + 0.5                                        # far
        elif kind == 2:
            o[i] = o[i] + 0.004                                      # close
        elif kind in (3, 4, 5):
            s_e, s_o = specials[case % 4], specials[(case // 4) % 4]
            if kind != 5:
                e[i] = s_e
            if kind != 4:
                o[i] = s_o if kind == 3 else s_e                     # both special; or the output only
        msg, err = compare.values(o, e, tol)
        bad, worst = _full_rule(o, e, tol)
        assert (msg is not None) == bad, (case, o, e, msg)
        if not bad:
            assert err == pytest.approx(worst, rel=1e-3, abs=1e-6), (case, o, e)


def test_bit_equal_outputs_pass_at_any_tolerance_and_near_misses_do_not():
    # the quick accept (torch.equal before the tolerance rule) must not widen what passes
    exp = torch.randn(4096).to(torch.bfloat16)
    exp[7], exp[9] = float("inf"), -0.0
    assert compare.values(exp.clone(), exp, {"atol": 0, "rtol": 0}) == (None, 0.0)
    off = exp.clone()
    off[100] = torch.nextafter(off[100].float(), torch.tensor(1e9)).to(torch.bfloat16) + 1
    assert "1 of 4096 elements" in compare.values(off, exp, {"atol": 0, "rtol": 0})[0]
    nan = exp.clone()
    nan[3] = float("nan")
    assert compare.values(nan, nan.clone(), {"atol": 0, "rtol": 0})[0] is None      # NaN where expected: the rule
    assert "NaN/Inf" in compare.values(nan, exp, {"atol": 1, "rtol": 1})[0]
    ints = torch.arange(10)
    assert compare.values(ints.clone(), ints, {"atol": 0, "rtol": 0}) == (None, 0.0)
    assert "1 of 10 values differ" in compare.values(ints + (ints == 4), ints, {"atol": 5, "rtol": 5})[0]
