"""Point-to-point staged through host memory where ranks share a GPU (rank/p2pstage.py, issue 46).

On CPU no tensor is CUDA, so each rank widens `staged` to every tensor: the same code paths run
(host copy, gloo, copy back at wait) on two gloo ranks, under the forbid guard as in a candidate
process. The GPU run (bench/gpu_shared.sh) is where CUDA tensors take them.
"""
from __future__ import annotations

import os
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pytest_kernelbench.rank import p2pstage

pytestmark = pytest.mark.e2e      # two rank processes (tests/e2e_guard.py)


def _rank(rank: int, world: int, init: str, forbid: list, out: str) -> None:
    try:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
        p2pstage.staged = lambda t: isinstance(t, torch.Tensor)      # CPU stands in for CUDA
        p2pstage.install()
        from pytest_kernelbench.rank.guards import ForbidGuard
        guard = ForbidGuard(forbid)
        guard.install()                        # above the staging, as in a candidate process
        guard.active = True
        peer = 1 - rank
        facts = {}
        # blocking send/recv, into a non-contiguous tensor
        if rank == 0:
            dist.send(torch.arange(6.0).reshape(2, 3), 1)
        else:
            dst = torch.zeros(3, 2).t()
            dist.recv(dst, 0)
            facts["recv"] = dst.tolist()
        # isend/irecv: the receiver's tensor changes only when its wait() returns (staged)
        dst = torch.full((4,), -1.0)
        works = [dist.isend(torch.full((4,), float(rank + 1)), peer), dist.irecv(dst, peer)]
        works[0].wait()
        import time
        time.sleep(0.2)                        # the bytes are in by now; the host copy holds them
        facts["before_wait"] = dst.tolist()
        works[1].wait()
        facts["after_wait"] = dst.tolist()
        # batch_isend_irecv through P2POp (which checks its op against c10d's names)
        dst2 = torch.zeros(5)
        ops = [dist.P2POp(dist.isend, torch.full((5,), 10.0 * (rank + 1)), peer), dist.P2POp(dist.irecv, dst2, peer)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        facts["batch"] = dst2.tolist()
        facts["guard"] = guard.collect(True)
        torch.save(facts, f"{out}.{rank}")
    except BaseException:      # noqa: BLE001 - the parent reads it
        with open(f"{out}.{rank}.err", "w") as f:
            f.write(traceback.format_exc())
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _run(tmp_path, forbid: list) -> list[dict]:
    init = f"file://{tmp_path}/store"
    out = str(tmp_path / "facts")
    mp.start_processes(_rank, args=(2, init, forbid, out), nprocs=2, join=True, start_method="fork")
    errs = [p.read_text() for p in tmp_path.glob("facts.*.err")]
    assert not errs, errs[0]
    return [torch.load(f"{out}.{r}") for r in range(2)]


def test_staged_point_to_point_delivers_at_wait_and_the_guard_sees_it_as_before(tmp_path):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    r0, r1 = _run(tmp_path, ["collectives"])
    assert r1["recv"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]      # into a transposed (non-contiguous) view
    # not yet copied back before wait(): the data went through the host buffer
    assert r0["before_wait"] == [-1.0] * 4 and r1["before_wait"] == [-1.0] * 4
    assert r0["after_wait"] == [2.0] * 4 and r1["after_wait"] == [1.0] * 4
    assert r0["batch"] == [20.0] * 5 and r1["batch"] == [10.0] * 5
    # allowed point-to-point: the sequence audit finds every step explained
    assert r0["guard"] == {} and r1["guard"] == {}


def test_a_forbidden_point_to_point_call_is_still_counted_under_the_staging(tmp_path):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    r0, _ = _run(tmp_path, ["collectives", "p2p"])
    assert any("p2p" in k for k in r0["guard"]), r0["guard"]


def test_only_gloo_carrying_cuda_tensors_is_staged():
    for backend, cuda in (("nccl", True), ("gloo", False)):
        p2pstage.serve(backend, cuda)
        assert dist.isend is p2pstage._ORIGINAL.get("isend", dist.isend) and not p2pstage._ORIGINAL
    p2pstage.serve("gloo", True)
    try:
        assert dist.isend is p2pstage._isend and dist.distributed_c10d.irecv is p2pstage._irecv
    finally:
        p2pstage.uninstall()
    assert not p2pstage._ORIGINAL and dist.isend is dist.distributed_c10d.isend
