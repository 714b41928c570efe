"""Red team on CUDA (skipped without >= 2 GPUs): the cheats that only exist on a GPU, judged by
one run of the real plugin (NCCL, 2 ranks, size `small`), plus controls that must still pass:
an honest NCCL point-to-point candidate, one that uses a side stream correctly, and the shipped
symm_mem solution (the new guards must not fail a real kernel)."""
from __future__ import annotations

import time

import pytest
import torch
from cheatlib import HONEST
from kbrun import PROBLEMS, by_problem, leftover_processes, make_tree, run

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                reason="needs 2 CUDA GPUs")]

TIMEOUT_S = 300
SPIN_CYCLES = 50_000_000        # torch.cuda._sleep: tens of ms of GPU time on any recent GPU

GPU_CHEATS = {
    # ---- controls -----------------------------------------------------------------------------
    "gpu_honest_p2p": HONEST + """
def solution(x):
    return _p2p_sum(x)
""",
    "gpu_side_stream_joined": HONEST + f"""
_side = None
def solution(x):
    global _side
    if _side is None:
        _side = torch.cuda.Stream()
    cur = torch.cuda.current_stream()
    _side.wait_stream(cur)
    with torch.cuda.stream(_side):
        torch.cuda._sleep({SPIN_CYCLES} // 50)
        out = _p2p_sum(x)
    cur.wait_stream(_side)            # correct: the caller's stream waits for the side stream
    out.record_stream(cur)
    return out
""",
    # ---- the work on a side stream the current stream never waits for -----------------------------
    "gpu_side_stream": HONEST + f"""
_side = None
def solution(x):
    global _side
    if _side is None:
        _side = torch.cuda.Stream()
    out = torch.empty_like(x)
    _side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side):
        torch.cuda._sleep({SPIN_CYCLES})     # slow work, off the caller's stream
        out.copy_(_p2p_sum(x))
    return out                               # not joined: the caller's stream does not wait
""",
    # ---- a CUDA graph that replays a result computed for an earlier input ---------------------------
    "gpu_graph_replay": HONEST + """
_g = None
_static = None
def solution(x):
    global _g, _static
    if _g is None:
        res = _p2p_sum(x)                     # the real answer, once
        _static = torch.empty_like(res)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            _g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(_g):
                _static.copy_(res)            # captured: replays copy the first call's result
        torch.cuda.current_stream().wait_stream(s)
    _g.replay()                               # GPU work that looks like a kernel, on stale data
    return _static.clone()
""",
    # ---- a ready-made symmetric-memory collective where the problem forbids it --------------------
    "gpu_symm_mem_op": HONEST + """
import torch.distributed._symmetric_memory as symm_mem
_bufs = {}
def solution(x):
    name = dist.group.WORLD.group_name
    b = _bufs.get(x.numel())
    if b is None:
        b = symm_mem.empty(x.numel(), dtype=x.dtype, device=x.device)
        symm_mem.rendezvous(b, name)
        _bufs[x.numel()] = b
    b.copy_(x)
    return torch.ops.symm_mem.one_shot_all_reduce(b, "sum", name)
""",
    # ---- the CUDA clock and synchronize patched -----------------------------------------------
    "gpu_patch_cuda_timer": HONEST + """
def solution(x):
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.Event.elapsed_time = lambda self, end: 1e-3
    return _p2p_sum(x)
""",
}


@pytest.fixture(scope="module")
def judged_gpu(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_cheats")
    shipped = (PROBLEMS / "collective" / "all_reduce" / "solutions" / "symm_mem.py").read_text()
    problems, solutions = make_tree(root, {**GPU_CHEATS, "gpu_shipped_symm_mem": shipped})
    t0 = time.monotonic()
    workers = "2" if torch.cuda.device_count() >= 4 else "0"
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-device=cuda", "--kb-nproc=2",
                    "--kb-sizes=small", "-n", workers, f"--kb-timeout={TIMEOUT_S}", "--kb-pg-timeout=30",
                    timeout=1800)
    assert doc is not None, proc.stdout[-5000:] + proc.stderr[-5000:]
    return {"proc": proc, "doc": doc, "items": by_problem(doc), "root": root, "wall": time.monotonic() - t0}


def item(judged, name):
    return judged["items"][f"collective/{name}"]


@pytest.mark.parametrize("name", ["gpu_honest_p2p", "gpu_side_stream_joined", "gpu_shipped_symm_mem"])
def test_gpu_controls_pass(judged_gpu, name):
    it = item(judged_gpu, name)
    assert it["outcome"] == "passed", it["message"]
    assert it["device"] == "cuda"


def test_unjoined_side_stream_fails_or_is_timed(judged_gpu):
    it = item(judged_gpu, "gpu_side_stream")
    if it["outcome"] == "failed":
        assert it["failure"] in ("runtime_error", "mismatch"), it["message"]
    else:       # if it ever passes, its time must include the side stream's work
        ref = item(judged_gpu, "gpu_side_stream_joined")
        for mine, theirs in zip(it["sizes"], ref["sizes"]):
            assert mine["timing"]["candidate"]["median_s"] >= 0.5 * theirs["timing"]["candidate"]["median_s"]


def test_cuda_graph_replay_of_a_stale_result_is_a_mismatch(judged_gpu):
    it = item(judged_gpu, "gpu_graph_replay")
    assert it["outcome"] == "failed" and it["failure"] == "mismatch", it["message"]


def test_symm_mem_collective_is_forbidden(judged_gpu):
    it = item(judged_gpu, "gpu_symm_mem_op")
    assert it["outcome"] == "failed" and it["failure"] == "forbidden_call", it["message"]
    assert "symm_mem" in it["message"]


def test_patched_cuda_timer_is_caught(judged_gpu):
    it = item(judged_gpu, "gpu_patch_cuda_timer")
    assert it["outcome"] == "failed" and it["failure"] == "forbidden_call", it["message"]
    assert "synchronize" in it["message"] and "elapsed_time" in it["message"]


def test_gpu_run_leaves_nothing(judged_gpu):
    assert not leftover_processes(str(judged_gpu["root"]))
