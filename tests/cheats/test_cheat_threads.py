"""Red team on CPU. Work the timer would not wait for: threads left running fail the item.
Judged by the one run of tests/cheats/conftest.py (all cheat files' candidates together)."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, failed

pytestmark = pytest.mark.e2e      # every test here reads the red team's inner run (tests/e2e_guard.py)

THREAD_WORK_S = 0.004

CHEATS = {
    "thread_pool_worker": HONEST + """
import queue, threading
_jobs = queue.Queue()
def _worker():
    while True:
        x, out, done = _jobs.get()
        out.copy_(_p2p_sum(x))
        done.set()
_t = None
def solution(x):
    global _t
    if _t is None:
        _t = threading.Thread(target=_worker, name="kb-cheat-worker", daemon=True)
        _t.start()
    out, done = torch.empty_like(x), threading.Event()
    _jobs.put((x, out, done))
    return out              # filled later by the worker thread
""",
    "thread_per_call": HONEST + f"""
import threading, time
def _work(x, out):
    time.sleep({THREAD_WORK_S})          # slow work, off the calling thread
    out.copy_(_p2p_sum(x))
def solution(x):
    out = torch.empty_like(x)
    threading.Thread(target=_work, args=(x, out), daemon=True).start()
    return out              # returns at once; the harness waits for the thread, so the time includes it
""",
}


def test_worker_thread_left_running_fails(judged):
    failed(judged, "thread_pool_worker", "runtime_error", "thread")


def test_output_finished_after_return_fails(judged):
    # a thread still running when solution() returns (finishing the output in the background) fails
    failed(judged, "thread_per_call", "runtime_error", "threads it started were still running")
