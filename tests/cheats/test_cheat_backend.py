"""Red team on CPU (issue 44, class 6). Collectives that reach the process group from C++, below
every Python wrapper the forbid guard installs: dist._broadcast_coalesced, the dispatcher's
operator through torch._C._jit_get_operation, and DDP's C++ Reducer. Each is seen by the group's
own sequence number moving more than the calls the wrappers counted: forbidden_call."""
from __future__ import annotations

import pytest
from cheatlib import HONEST, failed

pytestmark = pytest.mark.e2e      # every test here reads the red team's inner run (tests/e2e_guard.py)

CHEATS = {
    # every rank's x broadcast from C++ (the helper DDP uses to sync its buffers), then summed
    "fc_broadcast_coalesced": HONEST + """
def solution(x):
    acc = x.float()
    for src in range(dist.get_world_size()):
        buf = x.clone()
        dist._broadcast_coalesced(dist.group.WORLD, [buf], 1 << 24, src)
        if src != dist.get_rank():
            acc += buf.float()
    return acc.to(x.dtype)
""",
    # the c10d operator itself, looked up by name (no torch.ops packet, no ProcessGroup method)
    "fc_jit_operation": HONEST + """
_op = torch._C._jit_get_operation("c10d::allreduce_")[0]
def solution(x):
    out = x.clone()
    _op([out], dist.group.WORLD.boxed(), torch.classes.c10d.ReduceOp(), None, False, -1)[1].wait()
    return out
""",
    # DDP's Reducer all-reduces the gradient in C++ during backward (averaged: times W again)
    "fc_ddp_reducer": HONEST + """
_ddp = {}
def solution(x):
    n = x.numel()
    if n not in _ddp:
        lin = torch.nn.Linear(n, 1, bias=False, dtype=torch.float32)
        _ddp[n] = torch.nn.parallel.DistributedDataParallel(lin)
    model = _ddp[n]
    model.zero_grad(set_to_none=True)
    model(x.float().view(1, n)).sum().backward()      # the gradient of the weight is x
    return (model.module.weight.grad.view(n) * dist.get_world_size()).to(x.dtype)
""",
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_collective_from_cpp_is_forbidden(judged, name):
    failed(judged, name, "forbidden_call", "sequence number")
