"""The multicast switches of a candidate process, read-only and sealed before its code runs
(rank/sealenv.py; issue 44, class 5): a rewrite in place faults however short, the process's own
environment changes still work, and the checker sees from outside whether they are sealed."""
from __future__ import annotations

import ctypes
import os
import signal
import time

import pytest

from pytest_kernelbench.protocol import MULTICAST_OFF
from pytest_kernelbench.rank import sealenv

pytestmark = pytest.mark.e2e      # forks the sealed process (tests/e2e_guard.py)


@pytest.fixture
def guarded(monkeypatch):
    for k, v in MULTICAST_OFF.items():
        monkeypatch.setenv(k, v)


def _sealed_child(then, guard: bool = True) -> tuple[int, str]:
    """A forked process that seals its environment (with the audit hook that keeps its own changes
    working), says what is in force, then runs `then()` and waits to be killed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            seal = sealenv.Seal()
            said = seal.seal()
            if guard:
                from pytest_kernelbench.rank.multicast import MulticastGuard
                g = MulticastGuard()
                g.install()
                g.before_env_change = seal.writable
            os.write(w, f"{int(seal.sealed)} {said}".encode())
            then()
            os.write(w, b" | then ran")
            time.sleep(30)
        finally:
            os._exit(0)
    os.close(w)
    time.sleep(0.5)
    os.set_blocking(r, False)
    try:
        said = os.read(r, 4096).decode()
    except BlockingIOError:
        said = ""
    os.close(r)
    return pid, said


def _end(pid: int) -> int:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _libc():
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_void_p
    return libc


def test_a_guarded_string_rewritten_in_place_faults_at_once(guarded):
    def flip():
        ctypes.memmove(_libc().getenv(b"NCCL_NVLS_ENABLE"), b"1", 1)
    pid, said = _sealed_child(flip)
    time.sleep(0.2)
    assert _end(pid) == -signal.SIGSEGV, said
    assert "then ran" not in said


def test_its_own_environment_changes_still_work_and_the_switches_stay_sealed(guarded):
    def change():
        os.environ["HOME"] = "/elsewhere"          # an existing variable: its slot is written in place
        os.environ["KB_SEAL_NEW"] = "1"            # a new one: libc makes a new array
        del os.environ["HOME"]
        libc = ctypes.CDLL(None)
        libc.getenv.restype = ctypes.c_char_p
        assert libc.getenv(b"HOME") is None and libc.getenv(b"KB_SEAL_NEW") == b"1"
        assert libc.getenv(b"NCCL_NVLS_ENABLE") == b"0"
    pid, said = _sealed_child(change)
    try:
        assert "then ran" in said, said
        if said.startswith("1"):        # Linux >= 6.10
            assert sealenv.sealed_strings(pid), said
    finally:
        _end(pid)


def test_the_checker_sees_from_outside_whether_the_switches_are_sealed(guarded):
    pid, said = _sealed_child(lambda: None, guard=False)
    try:
        if not said.startswith("1"):
            pytest.skip(f"no mseal on this kernel: {said}")
        assert sealenv.sealed_strings(pid)
        assert not sealenv.sealed_strings(os.getpid())      # this process never sealed its own
    finally:
        _end(pid)
