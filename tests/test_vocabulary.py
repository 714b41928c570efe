"""One vocabulary: failure categories, outcomes and speed tiers are spelled only in protocol/
(every other module names them as protocol.Failure / Outcome / Tier members), and the report
schema's enums are protocol's."""
from __future__ import annotations

import ast
import json
from collections.abc import Iterable
from pathlib import Path

from pytest_kernelbench.protocol import TIERS, Failure, Outcome, Tier

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "pytest_kernelbench"
SCHEMA = PACKAGE / "schemas" / "report.schema.json"
VOCABULARY = {m.value: f"{type(m).__name__}.{m.name}" for e in (Failure, Outcome, Tier) for m in e}

# modules being rewritten by another helper at the time of the vocabulary change: the lead
# converts their literals after merging and empties this (path prefix -> values allowed there)
ALLOWED: dict[str, set[str]] = {}
# calls whose first argument is a key or a name, not a category ("passed" in an aggregate, the
# --kb-timeout option)
KEY_CALLS = {"get", "pop", "setdefault", "Option"}
WORD_LIST = 3       # a tuple/list/set of at least this many string constants, not all vocabulary: other words


def _not_vocabulary(tree: ast.AST, vocabulary: Iterable[str] = VOCABULARY) -> set[int]:
    """ids of string constants that cannot be a category, outcome or tier: docstrings, dict keys,
    subscripts (aggregate fields such as a["passed"]), the key of .get()/.pop(), an option's name,
    the left side of `in` (a substring or key test), and lists of other words (field names, C
    preprocessor directives) that happen to hold one."""
    out: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
        elif isinstance(n, ast.Dict):
            out.update(id(k) for k in n.keys if k is not None)
        elif isinstance(n, ast.Subscript):
            out.add(id(n.slice))
        elif isinstance(n, ast.Call) and n.args:
            name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
            if name in KEY_CALLS:
                out.add(id(n.args[0]))
        elif isinstance(n, ast.Compare) and isinstance(n.ops[0], (ast.In, ast.NotIn)):
            out.add(id(n.left))
        elif isinstance(n, (ast.Tuple, ast.List, ast.Set)) and len(n.elts) >= WORD_LIST:
            words = [e.value for e in n.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if len(words) == len(n.elts) and not set(words) <= set(vocabulary):
                out.update(id(e) for e in n.elts)
    return out


def literals(source: str) -> list[tuple[int, str]]:
    """(line, value) of every vocabulary value spelled as a string constant in `source`."""
    tree = ast.parse(source)
    skip = _not_vocabulary(tree)
    return sorted((n.lineno, n.value) for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in VOCABULARY
                  and id(n) not in skip)


def test_no_category_outcome_or_tier_literal_outside_protocol():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel.startswith("pytest_kernelbench/protocol/"):
            continue
        allowed = set().union(*(v for prefix, v in ALLOWED.items() if rel.startswith(prefix)))
        found += [f"{rel}:{line}: {value!r} (use {VOCABULARY[value]})"
                  for line, value in literals(path.read_text()) if value not in allowed]
    assert not found, "vocabulary spelled by hand:\n" + "\n".join(found)


# the job folder's names (protocol.JobLayout spells them; everyone else asks it)
LAYOUT_NAMES = {"hb", "logs", "error", "done", "job.json", "result.json", "exits.json", "torchrun.log", "secret"}
LAYOUT_PREFIXES = ("hb/", "logs/", "error/", "done/")


def layout_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every job-folder path spelled by hand: a name of JobLayout's as a string, or
    a string or f-string that starts with one of its folders."""
    tree = ast.parse(source)
    skip = _not_vocabulary(tree, LAYOUT_NAMES)
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr) and n.values and isinstance(n.values[0], ast.Constant):
            skip.add(id(n.values[0]))
            head = str(n.values[0].value)
            if head.startswith(LAYOUT_PREFIXES):
                out.append((n.lineno, head))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip and (
                n.value in LAYOUT_NAMES or n.value.startswith(LAYOUT_PREFIXES)):
            out.append((n.lineno, n.value))
    return sorted(out)


def test_no_job_folder_path_spelled_outside_protocol():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(REPO))
        if rel.startswith("pytest_kernelbench/protocol/") or any(rel.startswith(p) for p in ALLOWED):
            continue
        found += [f"{rel}:{line}: {text!r} (use protocol.JobLayout)" for line, text in layout_literals(path.read_text())]
    assert not found, "job folder paths spelled by hand:\n" + "\n".join(found)


def test_the_layout_scan_sees_what_it_must():
    src = '''def f(job_dir, rank, r):
    write(f"hb/rank{rank}", "x")
    p = job_dir / "done" / f"rank{r}"
    q = os.path.join(job_dir, "result.json")
    return {"error": p}, r["logs"], "error" in q, [os.path.join(job_dir, d) for d in ("done", "error", "hb")]
'''
    assert layout_literals(src) == [(2, "hb/rank"), (3, "done"), (4, "result.json"), (5, "done"), (5, "error"),
                                    (5, "hb")]


def test_the_scan_sees_what_it_must():
    # the literals a producer or a reader would write by hand are found; keys and docstrings are not
    src = '''"""a docstring that says passed and crash"""
def f(rec, a):
    """crash"""
    rec.update(outcome="failed", failure="crash")
    if rec["outcome"] == "passed" or rec.get("failure") in ("timeout", "mismatch"):
        return {"passed": a["skipped"], "x": a.get("error")}
    if rec.get("failure") in ("crash", "compile_error", "timeout"):
        return [k for k in a if k in ("total", "passed", "pass_rate")]
    return ("no_code", "message") if "error" in str(rec) else "on_par"
'''
    assert literals(src) == [(4, "crash"), (4, "failed"), (5, "mismatch"), (5, "passed"), (5, "timeout"),
                             (7, "compile_error"), (7, "crash"), (7, "timeout"), (9, "no_code"), (9, "on_par")]


def test_members_read_as_their_values_everywhere():
    # StrEnum: records and reports hold the same bytes as when they were plain strings
    assert str(Failure.CRASH) == f"{Failure.CRASH}" == "crash" and Outcome.PASSED == "passed"
    rec = {"outcome": Outcome.FAILED, "failure": Failure.TIMEOUT, "verdict": Tier.ON_PAR,
           "tiers": {Tier.BETTER: 1}}
    plain = {"outcome": "failed", "failure": "timeout", "verdict": "on_par", "tiers": {"better": 1}}
    for kw in ({}, {"indent": 1}, {"sort_keys": True}):
        assert json.dumps(rec, **kw) == json.dumps(plain, **kw)


def _enums(node: object, path: str = "") -> dict[str, list]:
    """Every enum list of the schema, by its path."""
    out: dict[str, list] = {}
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "enum":
                out[path] = v
            else:
                out.update(_enums(v, f"{path}/{k}"))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.update(_enums(v, f"{path}/{i}"))
    return out


def test_report_schema_enums_are_protocols():
    enums = _enums(json.loads(SCHEMA.read_text()))
    item = "/properties/items/items/properties"
    assert enums[f"{item}/outcome"] == [o.value for o in Outcome]
    assert enums[f"{item}/failure"] == [f.value for f in Failure] + [None]
    assert enums[f"{item}/verdict"] == [t.value for t, _ in TIERS] + [None]
    assert enums["/properties/aggregates/properties/failures/propertyNames"] == [f.value for f in Failure]
    # the outcomes that require a failure are protocol's non-passing, non-skipped ones
    assert enums[f"/properties/items/items/allOf/0/if{item[len('/properties/items/items'):]}/outcome"] == \
        [Outcome.FAILED.value, Outcome.ERROR.value]
