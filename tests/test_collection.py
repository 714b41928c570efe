"""Collection: ids, markers, selection, and a broken problem.yaml erroring alone."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from kbrun import PROBLEMS, REPO, by_problem, inner_env, make_tree, plugin_args, run

pytestmark = pytest.mark.e2e      # every test here runs an inner pytest or ranks (tests/e2e_guard.py)

COLLECTIVES = sorted(p.parent.name for p in PROBLEMS.glob("collective/*/problem.yaml"))


def collect(*args, cwd=REPO):
    cmd = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "--collect-only", "-q",
           "--strict-markers", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, env=inner_env())


def ids(out: str) -> list[str]:
    return sorted(line.split("::", 1)[1] for line in out.splitlines() if "::test_problem[" in line)


def test_every_problem_is_one_readable_item():
    proc = collect("problems")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folders = sorted(p.parent.relative_to(PROBLEMS).as_posix() for p in PROBLEMS.glob("*/*/problem.yaml"))
    assert ids(proc.stdout) == [f"test_problem[{f}]" for f in folders]
    assert len(folders) >= 50          # issue 6: the suite has at least 50 problems


def test_marker_expression_selects_exactly_the_collectives():
    proc = collect("problems", "-m", "collective")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ids(proc.stdout) == [f"test_problem[collective/{n}]" for n in COLLECTIVES]


def test_marker_expression_combines_yaml_fields():
    proc = collect("problems", "-m", "collective and easy")
    expected = []
    for name in COLLECTIVES:
        data = yaml.safe_load((PROBLEMS / "collective" / name / "problem.yaml").read_text())
        if data["difficulty"] == "easy":
            expected.append(f"test_problem[collective/{name}]")
    assert ids(proc.stdout) == sorted(expected) and expected


def test_keyword_selects_one_problem():
    proc = collect("problems", "-k", "all_reduce")
    assert ids(proc.stdout) == ["test_problem[collective/all_reduce]"]


def test_unknown_marker_is_still_rejected_under_strict_markers(tmp_path):
    (tmp_path / "test_x.py").write_text("import pytest\n@pytest.mark.not_a_marker\ndef test_x():\n    pass\n")
    proc = collect(str(tmp_path / "test_x.py"), cwd=tmp_path)
    assert proc.returncode != 0 and "not_a_marker" in proc.stdout + proc.stderr


def test_broken_problem_yaml_errors_alone_and_the_others_run(tmp_path):
    good = "import torch.distributed as dist\ndef solution(x):\n    out = x.clone()\n    dist.all_reduce(out)\n    return out\n"
    problems, solutions = make_tree(tmp_path, {"good": good, "broken": good}, yaml_patch={"forbid": []})
    y = problems / "collective" / "broken" / "problem.yaml"
    data = yaml.safe_load(y.read_text())
    data["difficulty"] = "trivial"
    y.write_text(yaml.safe_dump(data))
    proc, doc = run(tmp_path, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-timing=off")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out                       # the collection error is not hidden
    assert "broken/problem.yaml: field 'difficulty' is 'trivial'; expected one of easy, medium, hard" in out
    assert "Traceback" not in out
    assert by_problem(doc)["collective/good"]["outcome"] == "passed"


def test_problem_in_the_wrong_category_folder_is_rejected(tmp_path):
    problems, _ = make_tree(tmp_path, {"x": "def solution(x):\n    return x\n"})
    (problems / "collective" / "x").rename(problems / "collective" / "y")
    moved = problems / "p2p"
    moved.mkdir()
    (problems / "collective" / "y").rename(moved / "y")
    proc, doc = run(tmp_path, str(problems), "--kb-nproc=2")
    assert "category' is 'collective' but the problem lives under p2p/" in proc.stdout, proc.stdout + proc.stderr
    assert by_problem(doc)["p2p/y"]["failure"] == "invalid_problem"


def test_broken_problems_stay_in_a_marker_or_keyword_selection(tmp_path):
    """Issue 45 (3): a problem.yaml that does not load has no markers to match, so -m and -k used to
    deselect it silently (5 broken problems, `-m collective`: 7 passed, exit 0)."""
    problems, _ = make_tree(tmp_path, {"fine": "def solution(x):\n    return x\n",
                                       "bad_a": "", "bad_b": ""})
    for name in ("bad_a", "bad_b"):
        y = problems / "collective" / name / "problem.yaml"
        y.write_text(y.read_text().replace("difficulty:", "difficulty: trivial\nold_difficulty:"))
    listed = collect(str(problems), "-m", "p2p", cwd=tmp_path)
    assert ids(listed.stdout) == ["test_problem[collective/bad_a]", "test_problem[collective/bad_b]"], listed.stdout
    assert ids(collect(str(problems), "-k", "fine", cwd=tmp_path).stdout) == [
        "test_problem[collective/bad_a]", "test_problem[collective/bad_b]", "test_problem[collective/fine]"]
    # a run that selects none of the good ones: the broken ones still error, counted, and fail the run
    proc, doc = run(tmp_path, str(problems), "-m", "p2p")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert {k: v["failure"] for k, v in by_problem(doc).items()} == {
        "collective/bad_a": "invalid_problem", "collective/bad_b": "invalid_problem"}
    assert "2 errors" in proc.stdout and "kernelbench: run" in proc.stdout
    # --deselect still drops a node id the user names
    bad_a = next(line.split("::")[0] for line in listed.stdout.splitlines() if "bad_a" in line)
    listed = collect(str(problems), "-m", "p2p", f"--deselect={bad_a}", cwd=tmp_path)
    assert ids(listed.stdout) == ["test_problem[collective/bad_b]"], listed.stdout
