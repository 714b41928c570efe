"""Published JSON Schemas (pytest_kernelbench/schemas/): every problem.yaml and every report the
current code writes validate; a wrong field fails."""
from __future__ import annotations

import copy
import json

import jsonschema
import pytest
import yaml
from kbrun import PROBLEMS, REPO

SCHEMAS = REPO / "pytest_kernelbench" / "schemas"
BASELINES = REPO / "reports" / "baselines"


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def validator(name: str):
    s = schema(name)
    jsonschema.Draft202012Validator.check_schema(s)
    return jsonschema.Draft202012Validator(s)


def test_every_problem_yaml_validates():
    v = validator("problem")
    files = sorted(PROBLEMS.glob("*/*/problem.yaml"))
    assert len(files) >= 50
    for f in files:
        errors = sorted(v.iter_errors(yaml.safe_load(f.read_text())), key=str)
        assert not errors, f"{f}: {errors[0].message}"


@pytest.mark.parametrize("patch", [{"difficulty": "trivial"}, {"world_sizes": []}, {"colour": "red"},
                                   {"forbid": ["everything"]}, {"tolerance": {"atol": -1}}])
def test_a_wrong_problem_field_fails(patch):
    data = yaml.safe_load((PROBLEMS / "collective/all_reduce/problem.yaml").read_text())
    data.update(patch)
    assert list(validator("problem").iter_errors(data))


def current_reports() -> list:
    return [p for p in sorted(BASELINES.glob("*.json")) if json.loads(p.read_text()).get("schema_version") == 2]


def test_committed_reports_of_the_current_schema_validate():
    reports = current_reports()
    assert reports, "no committed report of schema_version 2 under reports/baselines/"
    v = validator("report")
    for p in reports:
        errors = sorted(v.iter_errors(json.loads(p.read_text())), key=str)
        assert not errors, f"{p.name}: {errors[0].json_path}: {errors[0].message}"


@pytest.mark.parametrize("where, value", [
    (("items", 0, "outcome"), "maybe"),
    (("items", 0, "failure"), "bad_luck"),
    (("items", 0, "run_id"), None),
    (("aggregates", "total"), "all"),
    (("schema_version",), 1),
])
def test_a_wrong_report_field_fails(where, value):
    doc = copy.deepcopy(json.loads(current_reports()[0].read_text()))
    node = doc
    for key in where[:-1]:
        node = node[key]
    if value is None:
        node.pop(where[-1])
    else:
        node[where[-1]] = value
    assert list(validator("report").iter_errors(doc))
