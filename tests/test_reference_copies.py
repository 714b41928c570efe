"""A candidate that is the problem's reference (comments, formatting, docstrings, annotations and
names changed) is no solution: it fails as `reference_copy` before launch and never counts as a
pass, as Good or in GM-Speedup; a candidate that does something else is judged as usual."""
from __future__ import annotations

import sys

import pytest
import yaml
from kbrun import PROBLEMS, REPO, RING, make_tree, run

sys.path.insert(0, str(REPO))
from pytest_kernelbench import metrics  # noqa: E402
from pytest_kernelbench.candidates.copies import is_reference_copy, normalize  # noqa: E402

REFERENCE = (PROBLEMS / "collective/all_reduce/reference.py").read_text()

# the all_reduce reference, disguised: other names and aliases, comments, a docstring, annotations,
# an unused import, imports reordered, another layout
DISGUISED = '''"""My own all-reduce, written from scratch."""
from __future__ import annotations
import os  # not used
import torch.distributed as d
import torch


def solution(inp: "torch.Tensor"):
    """Sum over ranks."""
    # copy first, so the input stays as it was
    result: torch.Tensor = inp.clone()
    d.all_reduce(result,
                 op=d.ReduceOp.SUM)   # the whole trick
    return (result)
'''


def test_a_disguised_reference_is_a_copy():
    assert is_reference_copy(DISGUISED, REFERENCE)
    assert is_reference_copy(REFERENCE, REFERENCE)


@pytest.mark.parametrize("change", [
    ("op=d.ReduceOp.SUM", "op=d.ReduceOp.MAX"),                 # another operation
    ("op=d.ReduceOp.SUM", "op=d.ReduceOp.SUM, async_op=False"),   # an argument spelled out
    ("inp.clone()", "inp.clone().contiguous()"),                  # another call
    ("    return (result)", "    result.mul_(1)\n    return (result)"),   # an extra statement
    ("d.all_reduce(", "torch.distributed.all_reduce("),          # another path to the call
])
def test_a_program_that_differs_is_not_a_copy(change):
    assert change[0] in DISGUISED
    assert not is_reference_copy(DISGUISED.replace(*change), REFERENCE)


def test_builtins_and_library_names_are_not_renamed():
    a = "def solution(x):\n    return max(x, key=len)\n"
    assert not is_reference_copy(a, a.replace("max", "min"))
    assert not is_reference_copy(a, a.replace("key=len", "key=abs"))
    assert is_reference_copy(a, a.replace("(x", "(y"))


def test_no_source_and_syntax_errors_are_never_copies():
    assert not is_reference_copy(None, REFERENCE)
    assert not is_reference_copy("def solution(:\n", REFERENCE)
    assert normalize("def solution(:\n") is None


def test_every_reference_normalizes_and_no_two_problems_share_one():
    seen: dict[str, str] = {}
    for path in sorted(PROBLEMS.glob("*/*/problem.yaml")):
        if yaml.safe_load(path.read_text()).get("kind") == "native":
            continue            # a native candidate is C++/CUDA: the Python reference is never its copy
        norm = normalize((path.parent / "reference.py").read_text())
        pid = path.parent.relative_to(PROBLEMS).as_posix()
        assert norm is not None, pid
        assert norm not in seen, f"{pid} has the same reference as {seen.get(norm)}"
        seen[norm] = pid


def test_aggregates_never_count_a_reference_copy_as_a_pass_good_or_in_the_gm():
    timed = {"outcome": "passed", "score": 1.5, "verdict": "better", "band": [1.4, 1.6]}
    copy = {"outcome": "failed", "failure": "reference_copy", "message": "..."}
    agg = metrics.aggregate([dict(timed, problem="a"), dict(copy, problem="b")])
    assert (agg["total"], agg["passed"], agg["reference_copies"]) == (2, 1, 1)
    assert agg["gm_speedup"] == pytest.approx(1.5) and agg["pass_good"] == 0.5 and agg["fast_1"] == 0.5
    assert agg["failures"] == {"reference_copy": 1}


@pytest.fixture(scope="module")
def copies_run(tmp_path_factory):
    """Through --kb-solutions on CPU: the disguised reference of all_reduce (which forbids the
    collective its reference calls), the disguised reference of a problem that forbids nothing
    (the free pass: a copy of it would pass every check), and an honest ring."""
    root = tmp_path_factory.mktemp("copies")
    problems, solutions = make_tree(root, {"copied": DISGUISED})
    # the honest one also carries a family and an unscored reason, which its record must carry on
    make_tree(root, {"honest": RING}, yaml_patch={"family": "ring_test", "unscored": "reported only"})
    aux = (PROBLEMS / "ep/moe_aux_loss/reference.py").read_text()
    assert yaml.safe_load((PROBLEMS / "ep/moe_aux_loss/problem.yaml").read_text())["forbid"] == []
    aux_disguised = "# aux loss, by me\n" + aux.replace("    ", "  ").replace("def solution(", "def solution( ")
    make_tree(root, {"aux_copied": aux_disguised}, base="ep/moe_aux_loss")
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-timing-rounds=6")
    assert doc is not None, proc.stdout + proc.stderr
    return proc, doc, {i["problem"]: i for i in doc["items"]}


@pytest.mark.e2e
def test_a_copied_reference_fails_as_reference_copy_through_kb_solutions(copies_run):
    proc, doc, items = copies_run
    for pid in ("collective/copied", "ep/aux_copied"):
        it = items[pid]
        assert (it["outcome"], it["failure"]) == ("failed", "reference_copy"), (pid, it.get("message"))
        assert "reference" in it["message"] and it.get("score") is None and it.get("verdict") is None
        assert not it.get("sizes"), "a copy is refused before launch"
    assert items["collective/honest"]["outcome"] == "passed"
    agg = doc["aggregates"]
    assert (agg["total"], agg["passed"], agg["reference_copies"]) == (3, 1, 2)
    assert agg["failures"] == {"reference_copy": 2}
    assert "reference copies: 2 (counted, never passed)" in proc.stdout
    honest = items["collective/honest"]
    assert (honest["family"], honest["unscored"], agg["unscored"]) == ("ring_test", "reported only", 1)
    assert doc["breakdowns"]["family"]["ring_test"]["passed"] == 1
