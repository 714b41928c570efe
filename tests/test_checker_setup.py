"""The checker's setup pieces that run in-process: its CUDA context made on a thread while the
solver processes start (rank/cuda.py: context_on_thread), against a stand-in torch (no GPU here)."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from pytest_kernelbench.rank.cuda import context_on_thread


def _context(set_device):
    torch = SimpleNamespace(cuda=SimpleNamespace(set_device=set_device, init=lambda: None))
    return context_on_thread(torch, 3)


def test_the_checkers_context_is_made_beside_the_callers_work_and_joined_before_use():
    started, release, seen = threading.Event(), threading.Event(), []

    def set_device(d):
        started.set()
        release.wait(10)        # a context takes ~0.3 s: the caller goes on meanwhile
        seen.append((d, threading.get_ident()))
    join = _context(set_device)
    assert started.wait(10)
    assert not seen, "the caller went on while the context was being made"
    release.set()
    join()
    assert seen == [(3, seen[0][1])] and seen[0][1] != threading.get_ident()


def test_a_context_that_cannot_be_made_fails_where_the_checker_waits_for_it():
    def set_device(d):
        raise RuntimeError("CUDA error: no CUDA-capable device is detected")
    join = _context(set_device)
    with pytest.raises(RuntimeError, match="no CUDA-capable device"):
        join()
