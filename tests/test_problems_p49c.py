"""Issue 49 (5, 6, 13): the oracles of p2p/zigzag_ring_attention_backward, collective/usp_attention and
p2p/linear_attn_cp_state_scan on CPU (gloo, W = 2). A planted wrong kernel per problem (a skipped
ring step, the Ulysses return in the wrong peer order, the previous rank's state dropped from the
scan), each the reference with one change, fails as `mismatch`; an honest kernel that sums in another
order (float64, everything gathered) passes, so the rms-scaled tolerances fail no honest order.
The shipped solutions (other algorithms: a k/v all-gather instead of Ulysses, gradients sent to
their owners instead of an accumulator ring, a two-level chunk scan) pass the same oracles, in the
same run at W = 2 and in one more at W = 4 (non-neighbour messages, several ring steps).
One inner pytest run judges the nine at W = 2."""
from __future__ import annotations

import pytest
from kbrun import PROBLEMS, by_problem, explain, make_tree, run

pytestmark = pytest.mark.e2e

ZIGZAG, USP, SCAN = "p2p/zigzag_ring_attention_backward", "collective/usp_attention", "p2p/linear_attn_cp_state_scan"


def planted(pid: str, old: str, new: str) -> str:
    ref = (PROBLEMS / pid / "reference.py").read_text()
    assert old in ref, f"{pid}: the planted change no longer applies"
    return ref.replace(old, new)


# honest: every input gathered, the task's formula in float64
EXACT = {
    ZIGZAG: '''import torch
import torch.distributed as dist

def solution(q, k, v, out, dout, lse):
    rank, world = dist.get_rank(), dist.get_world_size()
    c = q.shape[2] // 2
    def gather(x):
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous())
        chunks = [None] * (2 * world)
        for r, t in enumerate(parts):
            chunks[r], chunks[2 * world - 1 - r] = t[:, :, :c], t[:, :, c:]
        return torch.cat(chunks, 2).double()
    Q, K, V, O, DO = (gather(t) for t in (q, k, v, out, dout))
    L = gather(lse.unsqueeze(-1)).squeeze(-1)
    n, s = Q.shape[2], q.shape[-1] ** -0.5
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    P = torch.exp((Q @ K.transpose(-1, -2) * s).masked_fill(~mask, float("-inf")) - L[..., None])
    dS = P * (DO @ V.transpose(-1, -2) - (DO * O).sum(-1, keepdim=True))
    grads = (dS @ K * s, dS.transpose(-1, -2) @ Q * s, P.transpose(-1, -2) @ DO)
    rows = list(range(rank * c, (rank + 1) * c)) + list(range((2 * world - 1 - rank) * c, (2 * world - rank) * c))
    return tuple(g[:, :, rows].to(q.dtype).contiguous() for g in grads)
''',
    USP: '''import torch
import torch.distributed as dist

def solution(q, k, v):
    world = dist.get_world_size()
    ks, vs = [torch.empty_like(k) for _ in range(world)], [torch.empty_like(v) for _ in range(world)]
    dist.all_gather(ks, k)
    dist.all_gather(vs, v)
    rep = q.shape[1] // k.shape[1]
    K = torch.cat(ks).double().repeat_interleave(rep, 1)
    V = torch.cat(vs).double().repeat_interleave(rep, 1)
    p = (torch.einsum("shd,thd->hst", q.double(), K) * q.shape[-1] ** -0.5).softmax(-1)
    return torch.einsum("hst,thd->shd", p, V).to(q.dtype).contiguous()
''',
    SCAN: '''import torch
import torch.distributed as dist

def solution(q, k, v, log_g):
    world, rank = dist.get_world_size(), dist.get_rank()
    def gather(x):
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts).double()
    Q, K, V, G = gather(q), gather(k), gather(v), gather(log_g)
    t, h, dk = q.shape
    state = torch.zeros(h, dk, v.shape[-1], dtype=torch.float64)
    outs = []
    for i in range(Q.shape[0]):
        state = state * torch.exp(G[i]).view(h, 1, 1) + K[i].unsqueeze(-1) * V[i].unsqueeze(-2)
        outs.append(torch.einsum("hk,hkv->hv", Q[i], state))
    return (torch.stack(outs)[rank * t:(rank + 1) * t] * dk ** -0.5).to(q.dtype).contiguous()
''',
}

WRONG = {
    # the ring's blocks computed as zero (at W = 2: ring step 1 skipped), the own causal block kept
    ZIGZAG: planted(ZIGZAG, "    if q.is_cuda:\n        return torch.ops.aten._scaled_dot_product_flash_attention_backward(",
                    "    if not causal:\n        return tuple(torch.zeros_like(t) for t in (q, k, v))\n"
                    "    if q.is_cuda:\n        return torch.ops.aten._scaled_dot_product_flash_attention_backward("),
    # the Ulysses return read in the wrong peer order: each token gets the other member's heads
    USP: planted(USP, "return back.permute(1, 0, 2, 3)", "return back.flip(0).permute(1, 0, 2, 3)"),
    # the scan skips the previous rank: its state never reaches this one
    SCAN: planted(SCAN, "    for src in range(rank):\n", "    for src in range(rank - 1):\n"),
}


# issue 49: the shipped solution of each problem (problem.yaml `solutions`)
SHIPPED = {ZIGZAG: "direct_grads", USP: "kv_allgather_overlap", SCAN: "two_level_scan"}


def shipped(pid: str) -> str:
    return (PROBLEMS / pid / "solutions" / f"{SHIPPED[pid]}.py").read_text()


def name(pid: str, kind: str) -> str:
    return f"{pid.split('/')[1]}_{kind}"


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("p49c")
    for pid in (ZIGZAG, USP, SCAN):
        problems, solutions = make_tree(root, {name(pid, "exact"): EXACT[pid], name(pid, "wrong"): WRONG[pid],
                                               name(pid, "shipped"): shipped(pid)}, base=pid)
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2",
                    "--kb-timeout=120", "-n", "2")
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return by_problem(doc)


@pytest.fixture(scope="module")
def judged_w4(tmp_path_factory):
    root = tmp_path_factory.mktemp("p49c_w4")
    for pid in (ZIGZAG, USP, SCAN):
        problems, solutions = make_tree(root, {name(pid, "shipped"): shipped(pid)}, base=pid)
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=4",
                    "--kb-timeout=120", "-n", "2")
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return by_problem(doc)


@pytest.mark.parametrize("pid", [ZIGZAG, USP, SCAN])
def test_a_planted_wrong_kernel_fails_as_mismatch(judged, pid):
    it = judged[f"{pid.split('/')[0]}/{name(pid, 'wrong')}"]
    assert it["outcome"] == "failed" and it["failure"] == "mismatch", explain(it)


@pytest.mark.parametrize("pid", [ZIGZAG, USP, SCAN])
def test_an_honest_kernel_summing_in_another_order_passes(judged, pid):
    it = judged[f"{pid.split('/')[0]}/{name(pid, 'exact')}"]
    assert it["outcome"] == "passed", explain(it)


@pytest.mark.parametrize("pid", [ZIGZAG, USP, SCAN])
def test_the_shipped_solution_passes_at_w2_and_w4(judged, judged_w4, pid):
    key = f"{pid.split('/')[0]}/{name(pid, 'shipped')}"
    for world, doc in ((2, judged), (4, judged_w4)):
        it = doc[key]
        assert it["outcome"] == "passed" and it["world_size"] == world, explain(it)


def test_each_problem_lists_its_shipped_solution_for_cpu_and_cuda():
    import yaml
    for pid, sol in SHIPPED.items():
        data = yaml.safe_load((PROBLEMS / pid / "problem.yaml").read_text())
        assert data["solutions"] == {sol: {"devices": ["cpu", "cuda"]}}, pid
