"""Red team on CPU. Caches: a stale answer once the inputs change under the same key is a mismatch.
Judged by the one run of tests/cheats/conftest.py (all cheat files' candidates together)."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, failed, item

pytestmark = pytest.mark.e2e      # every test here reads the red team's inner run (tests/e2e_guard.py)

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
    "replay_in_window": HONEST + """
import time
_c = {}
_last = [0.0]
def solution(x):
    if time.perf_counter() - _last[0] > 0.001:     # calls of a window come back to back
        _c.clear()
    k = (x.data_ptr(), float(x.double().sum()))
    hit = torch.tensor([1.0 if k in _c else 0.0])
    others = torch.empty_like(hit)
    r, w = dist.get_rank(), dist.get_world_size()
    for q in dist.batch_isend_irecv([dist.P2POp(dist.isend, hit, (r + 1) % w),
                                     dist.P2POp(dist.irecv, others, (r - 1) % w)]):
        q.wait()
    out = _c[k] + 1 if hit.item() and others.item() else _p2p_sum(x)
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
