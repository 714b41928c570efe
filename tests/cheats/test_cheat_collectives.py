"""Red team on CPU. Forbidden collectives, reached in every way we know: each fails as forbidden_call.
Judged by the one run of tests/cheats/conftest.py (all cheat files' candidates together)."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, failed

pytestmark = pytest.mark.e2e      # every test here reads the red team's inner run (tests/e2e_guard.py)

CHEATS = {
    "fc_direct": HONEST + """
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out
""",
    "fc_getattr": HONEST + """
def solution(x):
    out = x.clone()
    getattr(dist, "all_" + "reduce")(out)
    return out
""",
    "fc_unwrapped": HONEST + """
import inspect
def _original(f):
    f = inspect.unwrap(f)
    for cell in getattr(f, "__closure__", None) or ():      # a counting wrapper's captured original
        v = cell.cell_contents
        if callable(v) and getattr(v, "__name__", "") == "all_reduce":
            return v
    return f
_ar = _original(torch.distributed.distributed_c10d.all_reduce)
def solution(x):
    out = x.clone()
    _ar(out)
    return out
""",
    "fc_funcol": HONEST + """
import torch.distributed._functional_collectives as funcol
def solution(x):
    return funcol.wait_tensor(funcol.all_reduce(x, "sum", dist.group.WORLD))
""",
    "fc_torch_ops": HONEST + """
def solution(x):
    y = torch.ops._c10d_functional.all_reduce(x, "sum", dist.group.WORLD.group_name)
    return torch.ops._c10d_functional.wait_tensor(y)
""",
    "fc_process_group": HONEST + """
def solution(x):
    out = x.clone()
    dist.group.WORLD.allreduce([out]).wait()
    return out
""",
    "fc_backend": HONEST + """
def solution(x):
    out = x.clone()
    dist.group.WORLD._get_backend(x.device).allreduce([out]).wait()
    return out
""",
    # honest while a dispatch mode watches; the ProcessGroup collective only in unwatched (timed) calls
    "fc_when_unwatched": HONEST + """
def solution(x):
    if torch._C._len_torch_dispatch_stack() > 0:
        return _p2p_sum(x)
    out = x.clone()
    dist.group.WORLD.allreduce([out]).wait()
    return out
""",
}


@pytest.mark.parametrize("name", ["fc_direct", "fc_getattr", "fc_unwrapped", "fc_process_group", "fc_backend"])
def test_collective_called_any_way_is_forbidden(judged, name):
    failed(judged, name, "forbidden_call", "collectives")


@pytest.mark.parametrize("name", ["fc_funcol", "fc_torch_ops"])
def test_functional_collectives_are_forbidden(judged, name):
    failed(judged, name, "forbidden_call", "_c10d_functional")


def test_collective_only_in_unwatched_timed_calls_is_forbidden(judged):
    """Every call is watched alike now (no dispatch mode marks the checked ones), so the collective
    it kept for "unwatched" calls is counted in its first non-setup call."""
    failed(judged, "fc_when_unwatched", "forbidden_call", "ProcessGroup.allreduce")
