"""spec.problem: problem.yaml validation names the file and the field; the real problems load."""
from __future__ import annotations

import pytest
from kbrun import PROBLEMS, make_tree

from pytest_kernelbench.spec.problem import ProblemError, load_problem


@pytest.mark.parametrize("field,value,message", [
    ("category", "misc", "field 'category' is 'misc'; expected one of"),
    ("world_sizes", [], "field 'world_sizes' must be a non-empty list"),
    ("dtype", "int3", "field 'dtype' is 'int3'"),
    ("sizes", {"small": {"n": 1}}, "must define 'tiny'"),
    ("forbid", ["nccl"], "field 'forbid' has 'nccl'"),
    ("tolerance", {"atol": -1}, "field 'tolerance.atol'"),
    ("colour", "blue", "unknown field 'colour'"),
    ("parallelism", "tp", "field 'parallelism' must be a list"),
])
def test_bad_yaml_field_names_file_and_field(tmp_path, field, value, message):
    problems, _ = make_tree(tmp_path, {"p": ""}, yaml_patch={field: value})
    with pytest.raises(ProblemError) as e:
        load_problem(problems / "collective" / "p" / "problem.yaml", problems)
    assert message in str(e.value) and "problem.yaml" in str(e.value)


def test_missing_harness_function_and_reference(tmp_path):
    problems, _ = make_tree(tmp_path, {"p": ""})
    folder = problems / "collective" / "p"
    (folder / "harness.py").write_text("def inputs(size, rank, world_size, gen, device, dtype):\n    return ()\n")
    with pytest.raises(ProblemError, match="harness.py: missing function 'cost\\(\\)'"):
        load_problem(folder / "problem.yaml", problems)
    (folder / "reference.py").unlink()
    with pytest.raises(ProblemError, match="reference.py: missing"):
        load_problem(folder / "problem.yaml", problems)


def test_real_problems_load():
    for y in PROBLEMS.glob("*/*/problem.yaml"):
        p = load_problem(y, PROBLEMS)
        assert p.id == y.parent.relative_to(PROBLEMS).as_posix()
        assert p.category in p.markers and p.difficulty in p.markers
