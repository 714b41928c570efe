"""Red team on CPU (issue 44, classes 2 and 3): the clock of a timed window, and the timed calls of
in-place problems. Its items are trees of the red team's one run (conftest.py) with knobs of their
own (KB_SPIN=1: the GPU's protocol, where the checker waited for the candidate's "armed" before it
started the clock; windows of 50 ms), W = 2, the tiny size.

Class 2, the window's clock: the candidate process is the harness's CandidateProcess code, so a
cheat can replace CandidateProcess.run_batch (or read the call's frame) and reach every input set
of a window the moment the batch comes.
- precompute_before_go: computes the window's calls when the batch comes, before "armed"; the
  window then only hands the answers back. Before: the clock started after "armed" (a 6-40x
  "speedup" here); now the batch is queued while the process is stopped and the clock starts
  before it is continued, so the precomputation is inside the window (category: timing, the
  ratio no longer inflated).
- forbidden_before_go: the same with a forbidden collective (dist.all_reduce), made before "go",
  when the forbid guard was not yet armed. Before: passed; now armed at the batch's receipt,
  inline in the serve loop (forbidden_call).
- lookahead_one_exchange: the first call of a window reads every set of the window (kept by a
  replaced run_batch) and serves them all with one exchange. Nothing stops a call from reading lent memory, so
  the gain is bounded instead: one-call windows on both sides bound the candidate's time per call
  (stats.lookahead_bound), and its ratio is capped at the bound (category: timing, capped).
Class 3, in-place timed calls (the grad_clip_inplace problem):
- inplace_nothing_when_timed: does nothing in windows of more than 4 calls (every timed round;
  the anti-caching passes and the trials hold 4 or 1) and returns a zero norm. Before: timed calls
  of in-place problems were never compared: passed at a large ratio; now mismatch.
- inplace_nothing_undescribed: does nothing in batches that do not describe their inputs (before,
  only timed windows). Now every batch of an in-place problem describes them: it cannot tell, so
  does the work (category: timing, the ratio no longer inflated).
"""
from __future__ import annotations

import pytest
from cheatlib import HONEST, Tree
from kbrun import explain

pytestmark = pytest.mark.e2e

EXCHANGE_S = 0.02
LOOKAHEAD_EXCHANGE_S = 0.05     # the lone calls' noise here is a few ms, and the bound takes it off

# the harness's own candidate-process class, found from the candidate's module (its process is that code)
PATCH = '''
import sys
_cp = sys.modules.get("pytest_kernelbench.rank.candidate")
_ready = {}
def _patch(compute):
    if _cp is None:
        return
    original = _cp.CandidateProcess.run_batch
    def run_batch(self, msg, seq):
        _ready.clear()
        if not msg.first and len(msg.calls) > 1:       # a timed window: every call now, before "go"
            for i in msg.calls:
                (x,) = self.sets[i]
                _ready[x.data_ptr()] = compute(x)
        return original(self, msg, seq)
    _cp.CandidateProcess.run_batch = run_batch
def solution(x):
    out = _ready.pop(x.data_ptr(), None)
    return out if out is not None else _p2p_sum(x)
'''

# the batch being served, kept by a replaced run_batch (sys._getframe into the harness's frame is
# refused by the file shield; a class attribute is not)
BATCH = '''
import sys
_batch = {}
_cp = sys.modules.get("pytest_kernelbench.rank.candidate")
if _cp is not None:
    _original = _cp.CandidateProcess.run_batch
    def _run_batch(self, msg, seq):
        _batch["self"], _batch["msg"] = self, msg
        return _original(self, msg, seq)
    _cp.CandidateProcess.run_batch = _run_batch
'''

# an exchange with a latency that dwarfs the loaded machine's noise (gloo's own calls take 1-4 ms
# there): what a call is credited with shows whether the latency was inside the clock
SLOW = f'''
import time
def _slow_sum(x):
    time.sleep({EXCHANGE_S})
    return _p2p_sum(x)
'''

CANDIDATES = {
    "clock_honest": HONEST + "\ndef solution(x):\n    return _p2p_sum(x)\n",
    "precompute_before_go": HONEST + SLOW + PATCH + "_patch(_slow_sum)\n",
    "forbidden_before_go": HONEST + PATCH + '''
def _forbidden(x):
    y = x.clone()
    dist.all_reduce(y)
    return y
_patch(_forbidden)
''',
    "lookahead_one_exchange": HONEST + SLOW.replace(str(EXCHANGE_S), str(LOOKAHEAD_EXCHANGE_S)) + BATCH + '''
_served = {}
def solution(x):
    me, msg = _batch.get("self"), _batch.get("msg")
    if me is None or msg is None or len(msg.calls) < 2:
        return _slow_sum(x)
    if x.data_ptr() not in _served:                  # the window's first call: all of them, one exchange
        _served.clear()
        xs = [me.sets[i][0] for i in msg.calls]
        outs = _slow_sum(torch.cat(xs)).split([t.numel() for t in xs])
        for t, o in zip(xs, outs):
            _served[t.data_ptr()] = o.view_as(t).clone()
    return _served.pop(x.data_ptr())
''',
}

INPLACE_SKIP = BATCH + '''
import time
import torch
import torch.distributed as dist

def _honest(max_norm, *grads):
    time.sleep(EXCHANGE_S)
    norms = torch._foreach_norm(grads)
    total_sq = torch.stack(norms).pow(2).sum()
    dist.all_reduce(total_sq, op=dist.ReduceOp.SUM)
    total_norm = total_sq.sqrt()
    clip_coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
    torch._foreach_mul_(grads, clip_coef)
    return total_norm

def solution(max_norm, *grads):
    msg = _batch.get("msg")
    if msg is not None and SKIP(msg):
        return torch.zeros((), dtype=torch.float32)  # nothing done, a wrong norm
    return _honest(max_norm, *grads)
'''
INPLACE_SKIP = INPLACE_SKIP.replace("EXCHANGE_S", str(EXCHANGE_S))
INPLACE = {
    "honest_clip": INPLACE_SKIP.replace("SKIP(msg)", "False").replace(f"time.sleep({EXCHANGE_S})", "pass"),
    "inplace_nothing_when_timed": INPLACE_SKIP.replace("SKIP(msg)", "len(msg.calls) > 4"),
    "inplace_nothing_undescribed": INPLACE_SKIP.replace("SKIP(msg)", "not msg.first and not msg.inputs"),
}


KNOBS = {"KB_SPIN": "1", "KB_DEV_ROUND_S": "0.05"}
TREES = [Tree(CANDIDATES, env=KNOBS, timeout_s=200),
         Tree(INPLACE, base="utility/grad_clip_inplace", env=KNOBS, timeout_s=200)]


def _size(it: dict) -> dict:
    (size,) = [s for s in it["sizes"] if s.get("timing")]
    return size


def _ratio(it: dict) -> float:
    """The size's time ratio (reference / candidate; on CPU "not a speed", kept as cpu_time_ratio)."""
    return _size(it)["cpu_time_ratio"]


def _why(it: dict) -> str:
    """A timed size's numbers, for assertion messages."""
    t = _size(it)["timing"]
    return (f"{it['problem']}: ratio {_ratio(it):.2f}, {t['candidate']['iters']} calls a window, per call "
            f"ref {t['reference']['median_s'] * 1e6:.0f} us, cand {t['candidate']['median_s'] * 1e6:.0f} us, "
            f"lone {t.get('lone')}, lookahead {t.get('lookahead')}")


def _credited_s(it: dict) -> float:
    """The time per call the size's ratio credits the candidate with: the reference's over the ratio."""
    return _size(it)["timing"]["reference"]["median_s"] / _ratio(it)


def _passed(judged, name) -> dict:
    it = judged["items"][name]
    assert it["outcome"] == "passed", explain(it)
    return it


def test_work_done_before_go_is_inside_the_window(judged):
    cheat = _passed(judged, "collective/precompute_before_go")
    # before: its windows only handed back answers made before the clock: well under 1 ms a call
    # credited, for calls of 20 ms
    assert _credited_s(cheat) > EXCHANGE_S / 2, _why(cheat)


def test_a_forbidden_call_before_go_is_counted(judged):
    it = judged["items"]["collective/forbidden_before_go"]
    assert (it["outcome"], it["failure"]) == ("failed", "forbidden_call"), explain(it)
    assert "all_reduce" in it["message"], it["message"]


def test_a_window_served_with_one_exchange_is_capped_at_its_lone_calls(judged):
    cheat = _passed(judged, "collective/lookahead_one_exchange")
    # before: one 50 ms exchange a window of 14-150 calls, a few ms a call credited; now its lone
    # calls (50 ms each) bound what it is credited with, less their noise
    assert _credited_s(cheat) > LOOKAHEAD_EXCHANGE_S / 4, _why(cheat)
    look = _size(cheat)["timing"]["lookahead"]
    assert look["capped"] and look["uncapped_speedup"] > _ratio(cheat), _why(cheat)
    # the bound and the lone calls it came from are in the record, on both sides
    lone = _size(cheat)["timing"]["lone"]
    assert len(lone["reference"]) == len(lone["candidate"]) >= 2


def test_honest_candidates_are_not_capped(judged):
    for name in ("collective/clock_honest", "utility/honest_clip"):
        it = _passed(judged, name)
        look = _size(it)["timing"].get("lookahead")
        assert look and not look["capped"], _why(it)


def test_an_in_place_candidate_that_does_nothing_in_timed_calls_fails(judged):
    it = judged["items"]["utility/inplace_nothing_when_timed"]
    assert (it["outcome"], it["failure"]) == ("failed", "mismatch"), explain(it)
    assert "timed call" in it["message"], it["message"]


def test_a_batch_does_not_say_whether_it_is_timed(judged):
    cheat = _passed(judged, "utility/inplace_nothing_undescribed")
    # before: only timed windows came without inputs described, and doing nothing there (its work
    # takes 20 ms a call) passed with well under 1 ms a call credited; now it cannot tell them
    # from the checked batches, so it does the work, inside the clock
    assert _credited_s(cheat) > EXCHANGE_S / 2, _why(cheat)
