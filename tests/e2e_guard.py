"""The `e2e` marker's guard: a test that starts a process (an inner pytest run, ranks through the
rank server, torchrun or launch.run_job, the CLI or a tool in a subprocess) must say so with
`@pytest.mark.e2e` (or a module's `pytestmark`), so that `pytest tests -m "not e2e"` stays the fast
in-process unit tests. Asking a tool its version (`nvcc --version`: the prompts state the toolchain)
is not a start that counts, nor matplotlib's `fc-list` (it lists the system's fonts once per machine,
the first time a plot is drawn where it has no font cache yet: a fresh machine's first plot test).
A test that starts one unmarked fails there and then, naming what it started.

Every process start goes through subprocess.Popen._execute_child or os.fork (multiprocessing's
fork context, the rank server's zygote forks in its own process, not ours); spawn and forkserver
contexts start their helper through _posixsubprocess via multiprocessing.util.spawnv_passfds.
Guards nest (a test may run an in-process pytest that itself runs this guard): the innermost
running test decides, an e2e one allowing starts, any other refusing them.

A test that reads a module-scoped fixture an e2e test of its module has already set up starts
nothing itself and passes here; run alone or under `-m "not e2e"` (a CI leg) it sets the fixture up
itself and fails.
"""
from __future__ import annotations

import multiprocessing.util
import os
import subprocess
from collections.abc import Generator
from typing import Any

import pytest

_recorders: list[list[str] | None] = []      # None: an e2e test's frame, where starts are allowed
_saved: dict[str, Any] = {}


def _record(what: str) -> None:
    """Refuse the start at once (a BaseException, so the code under test cannot swallow it as an
    error of its own), and remember it in case something swallows even that."""
    started = _recorders[-1] if _recorders else None
    if started is not None:
        started.append(what)
        raise pytest.fail.Exception(f"not marked e2e, yet starts a process: {what}", pytrace=False)


def _install() -> None:
    if _saved:
        return
    _saved["execute_child"] = execute_child = subprocess.Popen._execute_child   # type: ignore[attr-defined]
    _saved["fork"] = fork = os.fork
    _saved["spawnv_passfds"] = spawnv = multiprocessing.util.spawnv_passfds

    def guarded_execute_child(self, args, *rest, **kw):
        if not isinstance(args, str) and ((len(args) == 2 and args[1] == "--version")     # a toolchain's, for a prompt
                                          or (args and os.path.basename(str(args[0])) == "fc-list")):
            return execute_child(self, args, *rest, **kw)
        _record(f"subprocess {args if isinstance(args, str) else ' '.join(map(str, args))}"[:200])
        return execute_child(self, args, *rest, **kw)

    def guarded_fork():
        _record("os.fork")
        return fork()

    def guarded_spawnv(path, args, passfds):
        _record(f"multiprocessing {' '.join(map(str, args))}"[:200])
        return spawnv(path, args, passfds)

    subprocess.Popen._execute_child = guarded_execute_child   # type: ignore[attr-defined]
    os.fork = guarded_fork
    multiprocessing.util.spawnv_passfds = guarded_spawnv


def _uninstall() -> None:
    if _recorders or not _saved:
        return
    subprocess.Popen._execute_child = _saved.pop("execute_child")   # type: ignore[attr-defined]
    os.fork = _saved.pop("fork")
    multiprocessing.util.spawnv_passfds = _saved.pop("spawnv_passfds")


def _guarded(item: pytest.Item, phase: str) -> Generator[None, Any, Any]:
    started: list[str] | None = None if item.get_closest_marker("e2e") is not None else []
    if started is not None:
        _install()
    _recorders.append(started)
    try:
        result = yield
    finally:
        _recorders.pop()
        _uninstall()
    if started:
        raise pytest.fail.Exception(
            f"{item.nodeid} starts a process in {phase} but is not marked e2e (mark it "
            f"@pytest.mark.e2e, or the module with pytestmark = pytest.mark.e2e): " + "; ".join(started[:3]),
            pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _guarded(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _guarded(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    return (yield from _guarded(item, "teardown"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: starts processes (an inner pytest run, ranks, the CLI or a tool in a subprocess); "
                   "pytest tests -m 'not e2e' runs the in-process unit tests")
