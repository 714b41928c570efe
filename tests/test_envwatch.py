"""The environment watcher (rank/envwatch.py) survives whatever its process points `environ` at, and
the checker can tell when it no longer watches (issue 44, class 5): a pointer past 2^63 used to
raise an OverflowError that ended its loop unseen, and an unreadable one was taken for the process
having exited."""
from __future__ import annotations

import ctypes
import os
import signal
import time

import pytest

from pytest_kernelbench.protocol import MULTICAST_OFF
from pytest_kernelbench.rank.envwatch import EnvWatch

pytestmark = pytest.mark.e2e      # forks a watched process and the watcher (tests/e2e_guard.py)


def _child(action) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            time.sleep(0.2)
            action()
            time.sleep(30)
        finally:
            os._exit(0)
    return pid


def _environ():
    return ctypes.c_void_p.in_dll(ctypes.CDLL(None), "environ")


def _finding(watch: EnvWatch, within: float = 5.0) -> str | None:
    end = time.monotonic() + within
    while time.monotonic() < end:
        found = watch.finding()
        if found:
            return found
        time.sleep(0.02)
    return None


@pytest.fixture
def guarded(monkeypatch):
    for k, v in MULTICAST_OFF.items():
        monkeypatch.setenv(k, v)


def _run(action):
    pid = _child(action)
    watch = EnvWatch([pid], 0.01)
    try:
        return watch, _finding(watch)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        watch.stop()


@pytest.mark.parametrize("where", [(1 << 63) + 4096, (1 << 64) - 8, 4096, 0])
def test_an_environ_it_cannot_read_is_a_finding_not_the_watchers_end(guarded, where):
    def point():
        _environ().value = where       # nothing in this process calls getenv afterwards
    watch, found = _run(point)
    assert found and "could not be read" in found, found


def test_a_switch_rewritten_in_place_is_a_finding(guarded):
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_void_p

    def flip():
        ctypes.memmove(libc.getenv(b"NCCL_NVLS_ENABLE"), b"1", 1)
    _, found = _run(flip)
    assert found and "NCCL_NVLS_ENABLE='1'" in found, found


def test_a_watcher_killed_or_stopped_is_gone(guarded, monkeypatch):
    import pytest_kernelbench.rank.envwatch as envwatch
    monkeypatch.setattr(envwatch, "STALE_S", 0.5)
    pid = _child(lambda: None)
    watch = EnvWatch([pid], 0.01)
    try:
        time.sleep(0.3)
        assert watch.gone() is None
        os.kill(watch.watcher, signal.SIGSTOP)
        time.sleep(1.2)
        assert "has not turned" in (watch.gone() or "")
        os.kill(watch.watcher, signal.SIGKILL)
        end = time.monotonic() + 5           # reaped once the kernel has made it a zombie (a loaded machine: later)
        while "exited" not in (watch.gone() or "") and time.monotonic() < end:
            time.sleep(0.05)
        assert "exited" in (watch.gone() or "")
        assert watch.finding() is None
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        watch.stop()


def test_the_checker_reads_the_switches_itself_at_a_verdict(guarded):
    """A swap left in place at "done" is seen whatever the sampling: EnvWatch.now() reads them from
    the checker (a watcher sampling once an hour here)."""
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_void_p

    def flip():
        ctypes.memmove(libc.getenv(b"NCCL_NVLS_ENABLE"), b"1", 1)
    pid = _child(lambda: None)
    watch = EnvWatch([pid], 3600.0)
    try:
        assert watch.now(pid) is None
        bad = _child(lambda: setattr(_environ(), "value", (1 << 63) + 4096))
        flipped = _child(flip)
        time.sleep(0.5)
        assert "could not be read" in (watch.now(bad) or "")
        assert "NCCL_NVLS_ENABLE='1'" in (watch.now(flipped) or "")
        for p in (bad, flipped):
            os.kill(p, signal.SIGKILL)
            os.waitpid(p, 0)
        assert watch.now(bad) is None           # gone: judged elsewhere
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        watch.stop()


def test_a_garbage_entry_in_the_array_is_skipped_like_an_unmapped_one(guarded):
    """A stale array (an honest setenv moved it while it was read) holds whatever the allocator put
    there since: an entry past 2^63 raised OverflowError out of the scan, and the candidate was
    failed "unsafe" (seen once under load in the test suite, an honest planted kernel)."""
    keep = []

    def garbage_first():
        env = _environ()
        old = ctypes.cast(env.value, ctypes.POINTER(ctypes.c_void_p))
        entries = []
        while old[len(entries)]:
            entries.append(old[len(entries)])
        arr = (ctypes.c_void_p * (len(entries) + 2))((1 << 63) + 8, *entries, None)
        keep.append(arr)
        env.value = ctypes.addressof(arr)
    watch, found = _run(garbage_first)
    assert found is None, found


def test_a_change_counts_only_where_it_stays_over_a_few_reads(monkeypatch):
    """An honest setenv moving the array mid-read showed the guarded names missing (the torchrun
    leg of test_harness_cpu under load: "NCCL_NVLS_ENABLE='' (was '0')", unsafe) or a pointer past
    2^63 (OverflowError): a change or an unreadable array counts only when it stays."""
    from pytest_kernelbench.rank import envwatch
    want = {b"X": b"1"}
    env = envwatch._Env(os.getpid(), (b"X",))
    reads = iter([{}, OSError("moved"), {b"X": b"1"}])

    def settling():
        r = next(reads)
        if isinstance(r, Exception):
            raise r
        return r
    monkeypatch.setattr(env, "read", settling)
    assert env.changed(want) is None               # a stale view, an unreadable one, then the settled array
    monkeypatch.setattr(env, "read", lambda: {b"X": b"0"})
    assert "X='0' (was '1')" in (env.changed(want) or "")       # a change that stays
    monkeypatch.setattr(env, "read", lambda: (_ for _ in ()).throw(OSError("gone")))
    assert "could not be read" in (env.changed(want) or "")     # so does an unreadable array
    os.close(env.fd)
