"""The key service (launch/keyservice.py): a job's key and nonce handed to its checkers over an
abstract UNIX socket, once per rank and only to pids the launcher started; in-process, with this
test's own pid as the peer."""
from __future__ import annotations

import os
import time

from pytest_kernelbench.launch.keyservice import KeyService
from pytest_kernelbench.rank.checker import ask_secret


def _ask(address: str, rank: int) -> dict:
    return ask_secret(address, rank, 10)


def test_each_rank_gets_the_secret_once_and_only_from_a_pid_the_launcher_started():
    me, allow = os.getpid(), {"ok": True}
    keys = KeyService(f"\0kb-test-keys-{me}-a", "K", "N", lambda pid: pid == me and allow["ok"])
    try:
        assert _ask(keys.address, 0) == {"key": "K", "nonce": "N"}
        assert _ask(keys.address, 0) == {}, "a second request for the same rank"
        allow["ok"] = False
        import pytest_kernelbench.launch.keyservice as ks
        wait, ks.ACCEPT_WAIT_S = ks.ACCEPT_WAIT_S, 0.05
        try:
            assert _ask(keys.address, 1) == {}, "a pid the launcher did not start"
        finally:
            ks.ACCEPT_WAIT_S = wait
        assert len(keys.refused) == 2
    finally:
        keys.close()


def test_closing_the_service_takes_no_wait():
    # its accept() waited out a 0.2 s timeout before the thread saw that it should stop: up to
    # 0.2 s at the end of every job
    keys = KeyService(f"\0kb-test-keys-{os.getpid()}-b", "K", "N", lambda pid: True)
    time.sleep(0.05)
    t = time.monotonic()
    keys.close()
    assert time.monotonic() - t < 0.05
    assert not keys.thread.is_alive() and keys.secret == {}
