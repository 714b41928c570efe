"""Red team on CPU. Work the timer would not wait for: threads left running fail the item.
Judged by the one run of tests/cheats/conftest.py (all cheat files' candidates together)."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, failed, item

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
    # outputs finished after "done" by a thread the threading module never sees (started with
    # _thread): every call past the trials returns zeros (its answer kept aside) and the
    # thread copies the answers in 2 ms after the calls stopped. The checker reads the outputs at
    # "done" and stops the candidate process then, so the copies come too late, or are seen to land
    # (tests/test_timed_protocol.py shows the order, and that the read after the round's other
    # window, as it was before, let such copies in)
    "finished_after_done": HONEST + """
import _thread, time
_late = []                 # (returned output, its answer) of the window that just ran
_last = [0.0, 0]           # when the last call returned; calls so far
def _filler():
    while True:
        time.sleep(0.0001)
        if _late and time.perf_counter() - _last[0] > 0.002:       # the window is over
            for out, answer in _late:
                out.copy_(answer)
            _late.clear()
_thread.start_new_thread(_filler, ())
def solution(x):
    _last[1] += 1
    answer = _p2p_sum(x)
    out = answer
    if _last[1] > 2:                  # past the two one-call trials: every window, however long
        out = torch.zeros_like(answer)
        _late.append((out, answer))
    _last[0] = time.perf_counter()
    return out
""",
}


def test_worker_thread_left_running_fails(judged):
    failed(judged, "thread_pool_worker", "runtime_error", "thread")


def test_output_finished_after_return_fails(judged):
    # a thread still running when solution() returns (finishing the output in the background) fails
    failed(judged, "thread_per_call", "runtime_error", "threads it started were still running")


def test_outputs_finished_after_done_by_a_hidden_thread_fail(judged):
    # read at "done", with the candidate process stopped from then on: the checker reads the zeros
    # (mismatch), or, where the thread got to copy the answers in before the settle's second read,
    # sees them change after "done" (runtime_error); never a pass
    it = item(judged, "finished_after_done")
    assert it["outcome"] == "failed", f"not caught: {it['outcome']} {it.get('message')}"
    assert (it["failure"], "timed call" in it["message"]) == ("mismatch", True) or \
        (it["failure"], "changed after solution() returned" in it["message"]) == ("runtime_error", True), it["message"]
