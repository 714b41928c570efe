"""The rank's comparison functions (worker/compare.py) on layouts and dtypes beyond dense real
tensors: sparse inputs and outputs in every check (issue 22, item 4: PKB's 62 hands a sparse COO
tensor to solution()), complex values compared as complex (item 6: PKB's 59 returns complex64),
and the rules stricter than ParallelKernelBench named in the message (item 9)."""
from __future__ import annotations

import sys
import warnings

import pytest
import torch
from kbrun import REPO

sys.path.insert(0, str(REPO))
from pytest_kernelbench.rank import checks, compare  # noqa: E402

TOL = {"atol": 1e-2, "rtol": 1e-2}
pytestmark = pytest.mark.filterwarnings("ignore:Sparse")   # torch: beta / invariant-check notes


def coo(values=(3.0, 4.0, 5.0), indices=((0, 1, 1), (2, 0, 2)), shape=(2, 3)) -> torch.Tensor:
    return torch.sparse_coo_tensor(torch.tensor(indices), torch.tensor(values), shape).coalesce()


LAYOUTS = {"coo": lambda: coo(), "csr": lambda: coo().to_sparse_csr(), "csc": lambda: coo().to_sparse_csc()}


def sparse_values(t: torch.Tensor) -> torch.Tensor:
    return compare.parts(t)[-1]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_sparse_input_goes_through_every_check_of_a_call(layout):
    """Clone, the candidate call, unchanged inputs, aliasing, values: no check may crash on a
    sparse argument (PKB's 62 crashed the harness with NotImplementedError on SparseCPU)."""
    x = (torch.arange(6.0).reshape(2, 3), LAYOUTS[layout]())
    cand_in, ref_in, pristine = compare.clone(x), compare.clone(x), compare.clone(x)

    def right(dense, sparse):
        return dense + sparse.to_dense()
    out, expected = right(*cand_in), right(*ref_in)
    assert checks.check_call(out, expected, cand_in, ref_in, pristine, TOL, inplace=False)[:2] == (None, None)

    sparse_values(cand_in[1]).mul_(2)                 # the candidate wrote into the sparse input's values
    category, msg, _ = checks.check_call(out, expected, cand_in, ref_in, pristine, TOL, inplace=False)
    assert category == "mismatch" and msg == "input[1] was modified by the candidate (this problem is not in-place)"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_sparse_output_is_compared_by_value_and_layout(layout):
    expected = LAYOUTS[layout]()
    assert compare.structure(expected.clone(), expected) is None
    assert compare.values(expected.clone(), expected, TOL) == (None, 0.0)
    wrong = expected.clone()
    sparse_values(wrong)[1] += 1
    msg, err = compare.values(wrong, expected, TOL)
    assert "values differ: 1 of 6 elements" in msg and err == 1.0
    assert compare.structure(expected.to_dense(), expected) == f"out: expected layout {expected.layout}, got torch.strided"
    assert compare.structure(expected, expected.to_dense()) == f"out: expected a dense tensor, got layout {expected.layout}"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_sparse_output_sharing_an_input_storage_is_aliasing(layout):
    x = LAYOUTS[layout]()
    assert compare.aliasing(x, (x,)) is not None                       # returned the input itself
    assert compare.aliasing(x.clone(), (x,)) is None
    view = torch.sparse_coo_tensor(x.to_sparse_coo()._indices(), sparse_values(x), x.shape) if layout == "coo" else None
    if view is not None:                                               # a new tensor around the input's values
        assert "shares memory with an input" in compare.aliasing(view, (x,))
    assert compare.distinct([x, x.clone()]) is None and "share storage" in compare.distinct([x, x])


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_sparse_input_is_refilled_in_place_keeping_its_storage(layout):
    dst, src = LAYOUTS[layout](), LAYOUTS[layout]()
    sparse_values(src).mul_(-1)
    ptrs = [p.data_ptr() for p in compare.parts(dst)]
    compare.refill((dst,), (src,))
    assert [p.data_ptr() for p in compare.parts(dst)] == ptrs
    assert torch.equal(dst.to_dense(), src.to_dense())
    assert compare.differs(dst, src) is None and compare.unchanged((dst,), (src,)) is None
    bigger = coo(values=(1.0, 2.0, 3.0, 4.0), indices=((0, 0, 1, 1), (0, 2, 0, 2)))
    if layout != "coo":
        bigger = bigger.to_sparse_csr() if layout == "csr" else bigger.to_sparse_csc()
    with pytest.raises(RuntimeError, match=r"inputs\[0\] changed from \(2, 3\) \(torch.sparse_\w+, 3 stored values\) "
                                           r"to \(2, 3\) \(torch.sparse_\w+, 4 stored values\)"):
        compare.refill((dst,), (bigger,))


def test_complex_outputs_are_compared_as_complex():
    expected = torch.tensor([1 + 2j, 3 - 1j, -2 + 0.5j], dtype=torch.complex64)
    assert compare.values(expected.clone(), expected, TOL) == (None, 0.0)
    wrong_imag = expected.clone()
    wrong_imag[1] = 3 + 1j                       # the real part is right: a real-only comparison passes it
    msg, err = compare.values(wrong_imag, expected, TOL)
    assert msg is not None and "1 of 3 elements" in msg and "first at [1]: expected 3-1j, got 3+1j" in msg
    assert err == pytest.approx(2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # no "casting complex values discards the imaginary part"
        compare.values(expected * (1 + 1e-4), expected, TOL)
    nan = expected.clone()
    nan[0] = complex(float("nan"), 0)
    assert "NaN/Inf where the reference is finite" in compare.values(nan, expected, TOL)[0]
    assert compare.unchanged((nan,), (nan.clone(),)) is None          # a NaN input is unchanged when untouched


def test_integer_mismatch_within_pkb_tolerance_names_the_rule():
    expected = torch.tensor([1000, 2000, 3000])
    near = expected + torch.tensor([0, 1, 0])     # allclose at 1e-2 (PKB passes it), not exact
    msg, _ = compare.values(near, expected, TOL)
    assert msg.endswith("(rule: exact_integers)") and compare.rule_of(msg) == "exact_integers"
    far = expected + torch.tensor([0, 500, 0])
    msg, _ = compare.values(far, expected, TOL)
    assert msg is not None and compare.rule_of(msg) is None
    # a float output wrong elsewhere: the integer rule is not the only reason
    msg, _ = compare.values((near, torch.ones(2)), (expected, torch.zeros(2)), TOL)
    assert msg.startswith("out[0]:") and compare.rule_of(msg) is None


def test_dtype_mismatch_with_right_values_names_the_rule():
    expected = torch.linspace(-1, 1, 16, dtype=torch.bfloat16)
    msg = compare.structure(expected.float(), expected, tol=TOL)
    assert msg == "out: expected dtype torch.bfloat16, got torch.float32 (rule: dtype)"
    assert compare.structure(expected.float() + 1, expected, tol=TOL) == "out: expected dtype torch.bfloat16, got torch.float32"
    assert compare.structure(expected.float(), expected) == "out: expected dtype torch.bfloat16, got torch.float32"
    category, msg, _ = checks.check_call((expected.float(),), (expected,), (), (), (), TOL, inplace=False)
    assert category == "mismatch" and compare.rule_of(msg) == "dtype"


def test_rule_of_reads_only_known_rules():
    assert compare.rule_of("x (rule: forbidden_barrier)") == "forbidden_barrier"
    assert compare.rule_of("x (rule: made_up)") is None and compare.rule_of(None) is None
    assert set(compare.RULES) == {"exact_integers", "dtype", "forbidden_barrier"}
