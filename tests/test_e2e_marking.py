"""The e2e marker is kept honest (tests/e2e_guard.py, wired in by tests/conftest.py): a test that
starts a process without the marker fails, so `pytest tests -m "not e2e"` never quietly grows an
inner run. Checked by an in-process pytest over a few small tests under this very conftest."""
from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

CASES = '''
import multiprocessing as mp
import subprocess
import sys

import pytest


def test_pure():
    assert sum([1, 2]) == 3


def test_asks_a_tool_its_version():
    assert subprocess.run([sys.executable, "--version"], capture_output=True).returncode == 0


def test_lists_fonts_as_matplotlib_does_without_a_font_cache():
    try:
        subprocess.run(["fc-list", "--format=%{file}\\n"], capture_output=True)
    except FileNotFoundError:     # no fontconfig here: matplotlib then goes on without it too
        pass


def test_runs_a_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_forks_a_process():
    p = mp.get_context("fork").Process(target=print)
    p.start()
    p.join()


def test_spawns_a_process():
    p = mp.get_context("spawn").Process(target=print)
    p.start()
    p.join()


def test_swallows_the_refusal():
    try:
        subprocess.run(["true"])
    except BaseException:
        pass


@pytest.fixture(scope="module")
def inner_run():
    return subprocess.run(["true"]).returncode


def test_uses_a_module_fixture_that_runs_a_process(inner_run):
    assert inner_run == 0


@pytest.mark.e2e
def test_marked_may_run_a_process():
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0
'''


class _Outcomes:
    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, str]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = report.nodeid.rsplit("::", 1)[-1]
        if report.failed or (report.when == "call" and name not in self.seen):
            self.seen[name] = (f"{report.when}:{report.outcome}", str(report.longrepr or ""))


def test_an_unmarked_test_that_starts_a_process_fails_and_a_marked_one_passes(tmp_path, monkeypatch):
    # the inner run needs no installed plugin, and some start processes of their own at session
    # start (pytest-benchmark asks git for the commit), which this test's own guard would refuse
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
                                          + (TESTS / "conftest.py").read_text())
    (tmp_path / "test_cases.py").write_text(CASES)
    outcomes = _Outcomes()
    pytest.main([str(tmp_path), "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--strict-markers",
                 f"--rootdir={tmp_path}"], plugins=[outcomes])
    seen = outcomes.seen
    assert seen["test_pure"][0] == "call:passed"
    assert seen["test_asks_a_tool_its_version"][0] == "call:passed", seen
    assert seen["test_lists_fonts_as_matplotlib_does_without_a_font_cache"][0] == "call:passed", seen
    assert seen["test_marked_may_run_a_process"][0] == "call:passed"
    for name in ("test_runs_a_subprocess", "test_forks_a_process", "test_spawns_a_process", "test_swallows_the_refusal"):
        when, text = seen[name]
        assert when == "call:failed" and "not marked e2e" in text, (name, seen[name])
    assert "subprocess" in seen["test_runs_a_subprocess"][1] and "os.fork" in seen["test_forks_a_process"][1]
    when, text = seen["test_uses_a_module_fixture_that_runs_a_process"]
    assert when == "setup:failed" and "not marked e2e" in text, seen


def test_the_marker_is_registered(pytestconfig):
    assert any(line.startswith("e2e:") for line in pytestconfig.getini("markers"))


def test_a_gpu_only_module_that_starts_processes_says_so_in_its_marks():
    """The guard sees a start only where a test runs: a module skipped without CUDA that runs an
    inner pytest is never checked on a CPU machine, and on the GPU its unmarked start fails there
    (tests/cheats/test_gpu_shared_cheats.py did, on the first shared-GPU run)."""
    import ast
    missing = []
    for path in sorted([*TESTS.glob("test_*.py"), *TESTS.glob("cheats/test_*.py")]):
        text = path.read_text()
        tree = ast.parse(text)
        starts = any(isinstance(n, (ast.Import, ast.ImportFrom)) and any(
            m in (getattr(n, "module", None) or "") + " ".join(a.name for a in n.names)
            for m in ("kbrun", "cheatlib", "subprocess")) for n in ast.walk(tree))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
                marks = ast.get_source_segment(text, node) or ""
                if starts and "cuda" in marks and "e2e" not in marks:
                    missing.append(path.name)
    assert not missing, f"GPU-only modules that start processes without the e2e mark: {missing}"
