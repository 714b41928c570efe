"""The README is what a user needs and stays so: under 300 lines; every command in its code blocks
is run by a named test or by .ci/run (RUN_BY says where, and the test fails when a command is added,
changed or dropped without its entry, or when the entry's test no longer runs it); every page it
links exists; every `--kb-*` option the README and docs/ name is a real one. The reference lives in
docs/ (options, how one item runs, reports, threat model, ...), measured figures under
reports/baselines/."""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from kbrun import REPO, inner_env, plugin_args

from pytest_kernelbench.options import OPTIONS

README = REPO / "README.md"
MOST_LINES = 300

# command as the README shows it (its comment dropped) -> (where it runs, what that place must hold).
# A test is "tests/<file>.py::<function>" (a test or the fixture that makes the run), and each
# fragment must be in that function's source; ".ci/run" must hold each fragment.
RUN_BY: dict[str, tuple[str, list[str]]] = {
    "pip install -e . && pytest": (".ci/run", ["pip install -e . && pytest"]),
    "pip install -e '.[llm,test]' && pytest tests -n 3 --dist loadscope":
        (".ci/run", ["pip install -e '.[llm,test]' && pytest tests -n 3 --dist loadscope"]),
    'pytest -m "collective and easy"': (".ci/run", ["-m 'collective and easy'", "pip install -e . && pytest"]),
    "pytest -k all_reduce --kb-candidate=shipped":
        ("tests/test_readme.py::test_the_shipped_candidate_command_runs_and_says_why_on_cpu",
         ['"-k", "all_reduce"', '"--kb-candidate=shipped"']),
    "pytest --kb-solutions=my_kernels/":
        ("tests/test_first_ten_minutes.py::test_solutions_only_runs_what_the_folder_holds_and_tilde_is_expanded",
         ['"--kb-solutions=~/kernels"', '"no_code"']),
    "pytest --kb-solutions=my_kernels/ --kb-solutions-only":
        ("tests/test_first_ten_minutes.py::test_solutions_only_runs_what_the_folder_holds_and_tilde_is_expanded",
         ['"--kb-solutions-only"']),
    "pytest --kb-candidate=reference":
        ("tests/test_lent_objects.py::lent",
         ['"--kb-candidate=reference"']),
    "pytest -n 2": ("tests/test_harness_cpu.py::judged", ['"-n", "2"']),
    # the llm extra: CI installs it with the test extra (leg 2)
    "pip install -e '.[llm]'": (".ci/run", ["pip install -e '.[llm,test]'"]),
    # the key the provider needs: without it the run stops at once, naming the variable
    "export ANTHROPIC_API_KEY=...":
        ("tests/test_first_ten_minutes.py::test_a_missing_api_key_is_a_usage_error_within_seconds",
         ['k.endswith("_API_KEY")', "--kb-model="]),
    # a stub OpenAI-compatible server stands in for the provider (model_run passes --kb-model)
    "pytest --kb-model=anthropic/claude-opus-4-7 -k collective -n 2":
        ("tests/test_llm.py::main", ["model_run(", '"-n", "2"']),
    "kernelbench leaderboard reports/*.json --html board/index.html --png board/":
        ("tests/test_cli_html.py::page", ['"leaderboard"', '"--html"', '"--png"']),
    "kernelbench compare BASE.json NEW.json --fail-on=speedup:5%,pass":
        ("tests/test_cli_compare.py::test_planted_speed_regression_exits_1", ['"compare"', '"--fail-on=speedup:5%"']),
    "pytest --kb-pkb=~/ParallelKernelBench -n 2": ("tests/test_pkb.py::fixture_run", ['f"--kb-pkb={pkb}"', '"-n", "2"']),
    # the scoring service: started by the tests' Server (a free port), as `kernelbench serve --port`
    "kernelbench serve --port 8470": ("tests/test_service.py::__init__", ['"serve", "--port"']),
    "kernelbench reward reports/run.json --preset kevin":
        ("tests/test_rewards.py::test_kernelbench_reward_recomputes_from_a_stored_report", ['"reward"', '"kevin"']),
    "kernelbench prompt collective/all_reduce":
        ("tests/test_evaluate.py::test_kernelbench_prompt_and_try_the_agent_tools", ['"prompt"']),
    "kernelbench try collective/all_reduce solution.py":
        ("tests/test_evaluate.py::test_kernelbench_prompt_and_try_the_agent_tools", ['"try"', '"solution.py"']),
}


def readme_commands(text: str) -> list[str]:
    """Every command line of the README's shell blocks: indented blocks and ```bash/```sh fences
    (```python, ```cpp and ```text blocks are code or output, not commands); a trailing
    `  # comment` is dropped, a line ending in \\ is joined to the next."""
    out, fence, pending = [], None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else (line[3:].strip() or "sh")
            continue
        shell = fence in ("sh", "bash", "console") or (fence is None and line.startswith("    "))
        if shell and line.strip() and not line.lstrip().startswith("#"):
            command = pending + re.split(r"\s{2,}#\s", line.strip(), maxsplit=1)[0].strip()
            if command.endswith("\\"):
                pending = command[:-1].strip() + " "
            else:
                out.append(command)
                pending = ""
    return out


def _function_source(path: Path, name: str) -> str | None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return ast.get_source_segment(path.read_text(), node)
    return None


def test_the_readme_is_under_300_lines():
    lines = README.read_text().count("\n")
    assert lines < MOST_LINES, f"README.md has {lines} lines; reference belongs in docs/, figures in reports/baselines/"


def test_the_command_parser_finds_indented_and_fenced_commands():
    text = ("text\n\n    pytest -x          # a comment\n    kernelbench a \\\n        --b\n\n```bash\n#!/bin/bash\n"
            "salloc --nodes=2\n```\n\n```python\nimport torch\n```\n\n```text\nproblem  W  dev\n```\n")
    assert readme_commands(text) == ["pytest -x", "kernelbench a --b", "salloc --nodes=2"]


def test_every_readme_command_is_run_by_a_test_or_by_ci():
    commands = readme_commands(README.read_text())
    assert commands, "no command found in README.md"
    missing = [c for c in commands if c not in RUN_BY]
    assert not missing, f"README commands no test or CI runs (add each to RUN_BY with where it runs): {missing}"
    stale = [c for c in RUN_BY if c not in commands]
    assert not stale, f"RUN_BY lists commands the README no longer shows: {stale}"
    ci = (REPO / ".ci" / "run").read_text()
    for command in commands:
        where, fragments = RUN_BY[command]
        if where == ".ci/run":
            held = ci
        else:
            file, name = where.split("::")
            held = _function_source(REPO / file, name) or ""
            assert held, f"{command!r}: {where} does not exist"
        lost = [f for f in fragments if f not in held]
        assert not lost, f"{command!r}: {where} no longer holds {lost}"


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))])
def test_every_relative_link_resolves(page):
    path = REPO / page
    broken = [t for t in LINK.findall(path.read_text()) if not re.match(r"[a-z]+:", t)
              and not (path.parent / t).exists()]
    assert not broken, f"{page} links to what does not exist: {broken}"


def test_the_readme_links_every_docs_page():
    text = README.read_text()
    linked = {t for t in LINK.findall(text)}
    pages = {str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md")}
    assert pages and pages <= linked, f"docs pages the README does not link: {sorted(pages - linked)}"


def test_every_option_the_readme_and_docs_name_exists():
    known = {f"--kb-{o.name}" for o in OPTIONS}
    for path in [README, *(REPO / "docs").glob("*.md")]:
        named = set(re.findall(r"--kb-[a-z0-9-]*[a-z0-9]", path.read_text()))
        assert named <= known, f"{path.name} names options that do not exist: {sorted(named - known)}"


@pytest.mark.e2e
def test_the_shipped_candidate_command_runs_and_says_why_on_cpu(tmp_path):
    """The README's `pytest -k all_reduce --kb-candidate=shipped`, in the checkout, on one trial
    without timing: on a CPU machine all_reduce's shipped solutions need CUDA, and the item says
    so instead of failing; on GPUs the shipped solution passes."""
    report = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q", str(REPO / "problems"),
           "-k", "all_reduce", "--kb-candidate=shipped", "--kb-trials=1", "--kb-timing=off", f"--kb-report={report}"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=inner_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    items = {i["problem"]: i for i in json.loads(report.read_text())["items"]}
    assert "collective/all_reduce" in items
    for i in items.values():
        assert i["candidate"]["label"].startswith("shipped") if i["outcome"] == "passed" else \
            i["outcome"] == "skipped" and "shipped" in i["message"], i
