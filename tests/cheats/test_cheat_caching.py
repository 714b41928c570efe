"""Red team on CPU. Caches: a stale answer once the inputs change under the same key is a mismatch.
Judged by the one run of tests/cheats/conftest.py (all cheat files' candidates together)."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, failed

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
}


@pytest.mark.parametrize("name", ["cache_data_ptr", "cache_id", "cache_shape", "cache_few_values", "cache_full_hash"])
def test_cached_results_are_a_mismatch(judged, name):
    failed(judged, name, "mismatch")
