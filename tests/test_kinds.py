"""Problem kinds as strategies (issue 25): every stage asks the problem's Kind (spec/kinds.py), and
each kind has its part at every stage that dispatches on it."""
from __future__ import annotations

import ast

from kbrun import REPO

from pytest_kernelbench.candidates import prompt
from pytest_kernelbench.candidates.sections import template
from pytest_kernelbench.spec import problem as problem_module
from pytest_kernelbench.spec.kinds import KINDS

PACKAGE = REPO / "pytest_kernelbench"


def test_every_kind_has_its_part_at_every_stage_that_dispatches():
    assert set(problem_module.LOADERS) == set(KINDS), "spec/problem.py LOADERS: one loader per kind"
    assert set(prompt.TASKS) == set(KINDS), "candidates/prompt.py TASKS: one task text per kind"
    for kind in KINDS.values():
        template(kind.system_prompt)
        template(kind.refine_prompt)
        assert kind.language in ("python", "c")


def test_no_stage_tests_a_kind_by_its_name():
    """`problem.kind == "native"` scattered over the stages is what the Kind replaces: a comparison
    of anything named `kind` with a kind's name is allowed nowhere in the package."""
    names = set(KINDS)
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            named_kind = any(isinstance(s, ast.Attribute) and s.attr == "kind" or
                             isinstance(s, ast.Name) and s.id == "kind" for s in sides)
            literal = any(isinstance(s, ast.Constant) and s.value in names for s in sides)
            if named_kind and literal:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, "kind tested by name (ask problem.kind_spec instead): " + ", ".join(found)


def test_each_kind_routes_a_problem_through_its_own_parts():
    from pytest_kernelbench.spec.problem import load_problem
    root = REPO / "problems"
    rewrite = load_problem(root / "collective" / "all_reduce" / "problem.yaml", root)
    natives = sorted(root.glob("*/*/glue.py"))
    native = load_problem(natives[0].parent / "problem.yaml", root)
    assert rewrite.kind_spec.suffix(rewrite.template) == ".py" and rewrite.template is None
    assert native.kind_spec.suffix(native.template) in (".cu", ".cpp") and native.template
    assert native.kind_spec.built and not rewrite.kind_spec.built
