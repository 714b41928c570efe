"""Red team on one GPU shared by W = 2 ranks (--kb-oversubscribe, docs/one-gpu.md; skipped without
CUDA): peer-memory cheats that need two ranks, judged by one run of the real plugin with the job's
ranks on GPU 0 (CUDA_VISIBLE_DEVICES=0, so a machine of several GPUs shares one too), over gloo,
untimed. The candidates talk through symmetric memory only (all_reduce forbids collectives and
ready-made symm_mem ops; gloo has no CUDA point-to-point), so the control is an honest
symmetric-memory all-reduce and each cheat is that control with one step wrong:

- stale_peer: reads its peer's buffer before the peer has written this call's input (an early read
  through IPC: it gets the previous call's data, zeros on the first call);
- return_early: rank 1 returns what its buffer holds before rank 0's write into it has landed
  (rank 0 writes after a long GPU sleep, rank 1 never waits);
- skip_peer: never reads its peer at all (its own input alone).

The same checks as on W GPUs: each is a mismatch, and the control passes. Every record says shared."""
from __future__ import annotations

import pytest
import torch
from kbrun import by_problem, leftover_processes, make_tree, run

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SPIN_CYCLES = 100_000_000       # torch.cuda._sleep: tens of ms of GPU time, far longer than a time slice

SYMM = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_bufs = {}


def _buffer(x):
    n = x.numel()
    if n not in _bufs:
        w = dist.get_world_size()
        b = symm_mem.empty((w, n), dtype=x.dtype, device=x.device)
        b.zero_()
        h = symm_mem.rendezvous(b, dist.group.WORLD.group_name)
        _bufs[n] = (b, h)
    return _bufs[n]


def _slots(h, x, rank):
    return h.get_buffer(rank, (h.world_size, x.numel()), x.dtype)
'''

SHARED_CHEATS = {
    # ---- the control: every rank writes its input into its own slot of every buffer, barrier, sums ----
    "shared_honest_symm": SYMM + '''
def solution(x):
    b, h = _buffer(x)
    me = dist.get_rank()
    h.barrier()                       # the previous call's reads are done everywhere
    for r in range(h.world_size):
        _slots(h, x, r)[me].copy_(x.reshape(-1))
    h.barrier()                       # every write has landed
    return b.float().sum(0).to(x.dtype).view_as(x)
''',
    # ---- an early read: the peer's slot read before the peer writes this call's input ------------------
    "shared_stale_peer": SYMM + '''
def solution(x):
    b, h = _buffer(x)
    me = dist.get_rank()
    early = b.float().sum(0) - b[me].float() + x.reshape(-1).float()    # peers' slots, before they write
    h.barrier()
    for r in range(h.world_size):
        _slots(h, x, r)[me].copy_(x.reshape(-1))
    h.barrier()
    return early.to(x.dtype).view_as(x)
''',
    # ---- returns before its peer's write lands --------------------------------------------------------
    "shared_return_early": SYMM + f'''
def solution(x):
    b, h = _buffer(x)
    me = dist.get_rank()
    h.barrier()
    if me == 0:
        torch.cuda._sleep({SPIN_CYCLES})      # rank 0's writes come late
    for r in range(h.world_size):
        _slots(h, x, r)[me].copy_(x.reshape(-1))
    out = b.float().sum(0).to(x.dtype).view_as(x).clone()    # no barrier: whatever has landed
    h.barrier()
    return out
''',
    # ---- skips its peer -------------------------------------------------------------------------------
    "shared_skip_peer": SYMM + '''
def solution(x):
    b, h = _buffer(x)
    h.barrier()
    h.barrier()
    return x.clone()
''',
}


@pytest.fixture(scope="module")
def judged_shared(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_shared_cheats")
    problems, solutions = make_tree(root, SHARED_CHEATS)
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-device=cuda", "--kb-nproc=2",
                    "--kb-oversubscribe", "--kb-sizes=small", "--kb-timeout=300", "--kb-pg-timeout=30",
                    timeout=1200, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert doc is not None, proc.stdout[-5000:] + proc.stderr[-5000:]
    return {"proc": proc, "doc": doc, "items": by_problem(doc), "root": root}


def item(judged, name):
    it = judged["items"][f"collective/{name}"]
    assert it.get("placement") == "shared" and it["world_size"] == 2, it     # it ran shared, untimed
    assert it.get("score") is None and it.get("verdict") is None
    return it


def test_the_honest_symmetric_memory_control_passes_shared(judged_shared):
    it = item(judged_shared, "shared_honest_symm")
    assert it["outcome"] == "passed", it["message"]


@pytest.mark.parametrize("name", ["shared_stale_peer", "shared_return_early", "shared_skip_peer"])
def test_a_peer_memory_cheat_is_a_mismatch_on_a_shared_gpu(judged_shared, name):
    it = item(judged_shared, name)
    assert it["outcome"] == "failed" and it["failure"] == "mismatch", it["message"]


def test_the_shared_run_leaves_nothing(judged_shared):
    assert not leftover_processes(str(judged_shared["root"]))
