"""Red team on CPU. Timing set by the candidate: slow only in a size's first timed windows (its
warm-up and, before, its two probe windows, which it can tell by their place), so that its probes
said every window should hold one call: the windows' fixed part (barrier, "go", synchronize,
"done") then outweighed the calls and its speedup read near 1 whatever it was. The reference's
probes alone now set the calls a window holds (rank/timing.py). A tree of the red team's one run
(conftest.py) at 50 ms windows (a dev knob its items alone get), where the reference's calls fit
many to a window and a probe call of 0.1 s asks for one."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, Tree
from kbrun import explain

pytestmark = pytest.mark.e2e

CANDIDATES = {
    "sandbag_honest": HONEST + "\ndef solution(x):\n    return _p2p_sum(x)\n",
    "sandbag_probes": HONEST + """
import time
_calls = {}
def solution(x):
    k = _calls[x.shape] = _calls.get(x.shape, 0) + 1
    if 2 < k <= 40:      # past the two trials: the size's first timed windows, not its rounds
        time.sleep(0.1)
    return _p2p_sum(x)
""",
}


TREES = [Tree(CANDIDATES, env={"KB_DEV_ROUND_S": "0.05"}, timeout_s=90)]


def _iters(it: dict) -> int:
    (size,) = [s for s in it["sizes"] if s.get("timing")]
    assert size["timing"]["reference"]["iters"] == size["timing"]["candidate"]["iters"]
    return size["timing"]["candidate"]["iters"]


def test_a_candidate_slow_in_its_first_timed_windows_does_not_shrink_the_windows(judged):
    honest, cheat = judged["items"]["collective/sandbag_honest"], judged["items"]["collective/sandbag_probes"]
    assert honest["outcome"] == cheat["outcome"] == "passed", explain(cheat)
    # before: 1 call a window for the cheat (its 0.1 s probe calls against 50 ms windows)
    assert _iters(honest) >= 3 and _iters(cheat) >= 3, (_iters(honest), _iters(cheat))
