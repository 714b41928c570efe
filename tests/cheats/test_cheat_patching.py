"""Red team on CPU. Patching the clock or the comparison: harmless (both are the checker's), or refused.
Judged by the one run of tests/cheats/conftest.py (all cheat files' candidates together)."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, failed, item
from kbrun import explain

pytestmark = pytest.mark.e2e      # every test here reads the red team's inner run (tests/e2e_guard.py)

CHEATS = {
    "patch_timer_import": HONEST + """
import time
_real = time.perf_counter
time.perf_counter = lambda: _real() * 0.001      # a slow clock for everyone, patched at import
def solution(x):
    return _p2p_sum(x)
""",
    "patch_timer_call": HONEST + """
import time
_real = time.perf_counter
def solution(x):
    time.perf_counter = lambda: _real() * 0.001
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.Event.elapsed_time = lambda self, end: 1e-6
    return _p2p_sum(x)
""",
    "patch_compare": HONEST + """
import torch.testing
def solution(x):
    torch.allclose = lambda *a, **k: True
    torch.equal = lambda *a, **k: True
    torch.testing.assert_close = lambda *a, **k: None
    torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
    return torch.zeros_like(x)
""",
    "patch_tensor_any": HONEST + """
def solution(x):
    torch.Tensor.any = lambda self, *a, **k: torch.tensor(False)
    return torch.zeros_like(x)
""",
    "patch_harness_module": HONEST + """
import sys
def solution(x):
    for name, mod in list(sys.modules.items()):
        if name.endswith(("worker.compare", "rank.compare")):
            mod.structure = lambda *a, **k: None
            mod.values = lambda *a, **k: (None, 0.0)
            mod.unchanged = lambda *a, **k: None
            mod.aliasing = lambda *a, **k: None
            mod.distinct = lambda *a, **k: None
    return torch.zeros_like(x)
""",
    "patch_code_object": HONEST + """
import sys
def _ok(*a, **k):
    return None, 0.0
def solution(x):
    for name, mod in list(sys.modules.items()):
        if name.endswith(("worker.compare", "rank.compare")):
            mod.values.__code__ = _ok.__code__        # same function object, new body
    return torch.zeros_like(x)
""",
    "global_dispatch_mode": HONEST + """
from torch.utils._python_dispatch import TorchDispatchMode
class _Agree(TorchDispatchMode):          # left active: every later op (the check's too) runs through it
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name.startswith("aten.any"):
            return torch.tensor(False)
        if name.startswith("aten.equal"):
            return True
        return func(*args, **(kwargs or {}))
_mode = None
def solution(x):
    global _mode
    if _mode is None:
        _mode = _Agree()
        _mode.__enter__()
    return torch.zeros_like(x)
""",
}


@pytest.mark.parametrize("name", ["patch_timer_import", "patch_timer_call"])
def test_patching_the_clock_is_harmless(judged, name):
    """The clock is the checker's, in another process: a candidate that patches its own times
    nothing but itself, and is judged on what it computes (these compute the right answer)."""
    it = item(judged, name)
    assert it["outcome"] == "passed", explain(it)


@pytest.mark.parametrize("name", ["patch_compare", "patch_tensor_any", "patch_harness_module", "patch_code_object"])
def test_patching_the_check_is_harmless(judged, name):
    """The comparison runs in the checker: patched comparison functions in the candidate's process
    change nothing, and its garbage output is a mismatch."""
    # patching a function's code object is also refused outright by the candidate's shield
    failed(judged, name, "forbidden_call" if name == "patch_code_object" else "mismatch")


def test_a_dispatch_mode_left_active_breaks_the_global_state_rule(judged):
    failed(judged, "global_dispatch_mode", "forbidden_call", "global torch state", "dispatch modes left active")
