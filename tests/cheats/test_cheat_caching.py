"""Red team on CPU. Caches: a stale answer once the inputs change under the same key is a mismatch.
Judged by the one run of tests/cheats/conftest.py (all cheat files' candidates together)."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, Tree, failed, item

pytestmark = pytest.mark.e2e      # every test here reads the red team's inner run (tests/e2e_guard.py)

# The replays' agreement: a rank replays only where its ring neighbour met the call before too
# (every rank, at W = 2), so no rank waits in a send/recv for a peer that replays.
AGREE = """
def _all_met(met):
    mine = torch.tensor([1.0 if met else 0.0])
    others = torch.empty_like(mine)
    r, w = dist.get_rank(), dist.get_world_size()
    for q in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, (r + 1) % w),
                                     dist.P2POp(dist.irecv, others, (r - 1) % w)]):
        q.wait()
    return bool(mine.item() and others.item())
"""

CHEATS = {
    "cache_data_ptr": HONEST + """
_c = {}
def solution(x):
    k = x.data_ptr()
    if k not in _c:
        _c[k] = _p2p_sum(x)
    return _c[k].clone()
""",
    "cache_id": HONEST + """
_c = {}
def solution(x):
    k = id(x)
    if k not in _c:
        _c[k] = _p2p_sum(x)
    return _c[k].clone()
""",
    "cache_shape": HONEST + """
_c = {}
def solution(x):
    k = tuple(x.shape)
    if k not in _c:
        _c[k] = _p2p_sum(x)
    return _c[k].clone()
""",
    "cache_few_values": HONEST + """
_c = {}
def solution(x):
    k = tuple(x[:8].tolist()) + tuple(x[-8:].tolist())
    if k not in _c:
        _c[k] = _p2p_sum(x)
    return _c[k].clone()
""",
    "cache_full_hash": HONEST + """
import hashlib
_c = {}
def solution(x):
    k = hashlib.sha1(x.view(torch.int16).numpy().tobytes()).hexdigest()
    if k not in _c:
        _c[k] = _p2p_sum(x)
    return _c[k].clone()
""",
    # a replay inside a window: a set met again in the same window (same memory, same values) gets
    # a copy of its first answer, forgotten between windows (told apart by the pause; the ranks
    # agree on every replay, so none waits for a peer that replays). A correct replay would pass
    # every check with a false speedup; this one answers wrong when it replays, so an item that
    # passes shows no call met memory and values an earlier call of its window met
    "replay_in_window": HONEST + AGREE + """
import time
_c = {}
_last = [0.0]
def solution(x):
    if time.perf_counter() - _last[0] > 0.001:     # calls of a window come back to back
        _c.clear()
    k = (x.data_ptr(), float(x.double().sum()))
    out = _c[k] + 1 if _all_met(k in _c) else _p2p_sum(x)
    _c.setdefault(k, out)
    _last[0] = time.perf_counter()
    return out.clone()
""",
}


def test_no_set_is_called_twice_in_a_window(judged):
    """On 1924c3d this failed (mismatch: a window of 4 calls met 2 sets, so calls replayed); since, every call of a window
    has its own slot (rank/slots.py), so there is nothing to replay."""
    it = item(judged, "replay_in_window")
    assert it["outcome"] == "passed", f"{it['outcome']} {it.get('failure')}: {it.get('message')}"


@pytest.mark.parametrize("name", ["cache_data_ptr", "cache_id", "cache_shape", "cache_few_values", "cache_full_hash"])
def test_cached_results_are_a_mismatch(judged, name):
    failed(judged, name, "mismatch")


# A replay keyed on what a set holds, not where it lies: a call whose inputs hold values an earlier
# call's inputs held (on every rank at once: the ranks agree on each replay, so none waits for a
# peer that replays) gets a copy of that call's answer. The anti-caching passes after timing
# refresh some ranks' sets only, so there the ranks never agree and it computes.
REPLAY_VALUES = HONEST + AGREE + """
import hashlib
_c = {}
def solution(x):
    k = hashlib.sha1(x.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
    out = _c[k] if _all_met(k in _c) else _p2p_sum(x)
    _c.setdefault(k, out)
    return out.clone()
"""
TREES = [Tree({"replay_values_in_window": REPLAY_VALUES}, env={"KB_DEV_ROUND_S": "0.05"}, timeout_s=60)]


def test_a_replay_of_the_values_a_window_met_before_is_a_mismatch(judged):
    """On e19b152 this passed (with a false speedup): a timed window held more calls than fresh
    sets, and each later slot was a copy of an earlier one on every rank alike, so the whole job's
    inputs repeated and a replay keyed on a rank's own values was right. Since, at W > 1 a copy
    holds on each rank a set drawn from the job's key so that no two calls of a window meet the
    same inputs on every rank (rank/slots.py): a replay answers for inputs the job never had.
    A tree of the red team's run with windows of 50 ms (a dev knob its item alone gets, TREES), so
    that a window holds more calls than the 8 fresh sets a CPU round makes however loaded the
    machine (at 10 ms a loaded one made windows of 8 calls or fewer: nothing repeated, nothing to
    catch)."""
    it = item(judged, "replay_values_in_window")
    assert (it["outcome"], it["failure"]) == ("failed", "mismatch"), f"{it['outcome']} {it.get('failure')}: {it['message']}"
    assert "timed call" in it["message"], it["message"]
