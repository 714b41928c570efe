"""The checker's setup pieces that run in-process (rank/checker.py): its CUDA context made on a
thread while the solver processes start, against a stand-in torch (no GPU here)."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from pytest_kernelbench.rank.checker import Checker


def _checker(set_device) -> Checker:
    c = Checker.__new__(Checker)
    c.local_rank = 3
    c.torch = SimpleNamespace(cuda=SimpleNamespace(set_device=set_device, init=lambda: None))
    return c


def test_the_checkers_context_is_made_beside_the_callers_work_and_joined_before_use():
    started, release, seen = threading.Event(), threading.Event(), []

    def set_device(d):
        started.set()
        release.wait(10)        # a context takes ~0.3 s: the caller goes on meanwhile
        seen.append((d, threading.get_ident()))
    join = _checker(set_device).context_early()
    assert started.wait(10)
    assert not seen, "the caller went on while the context was being made"
    release.set()
    join()
    assert seen == [(3, seen[0][1])] and seen[0][1] != threading.get_ident()


def test_a_context_that_cannot_be_made_fails_where_the_checker_waits_for_it():
    def set_device(d):
        raise RuntimeError("CUDA error: no CUDA-capable device is detected")
    join = _checker(set_device).context_early()
    with pytest.raises(RuntimeError, match="no CUDA-capable device"):
        join()
