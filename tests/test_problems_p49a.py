"""Issue 49's problems allreduce_decode, all_gather_v_reduce_scatter_v, decode_gemv_allreduce and
hsdp_grad_sync: their oracles in both directions. A planted wrong kernel per problem (a rank's
contribution skipped, blocks in the wrong peer order, a partial left out, bfloat16 accumulation)
must fail as `mismatch`; an honest kernel that takes another path than the reference (another
summation order or precision, another exchange) must pass. One inner run on CPU (gloo, W = 2)
evaluates them all, each as a copy of its problem.
"""
from __future__ import annotations

import pytest
from kbrun import by_problem, explain, make_tree, run

pytestmark = pytest.mark.e2e      # an inner pytest run with ranks (tests/e2e_guard.py)

# every rank's tensor from every other rank, point to point (legal where only collectives are forbidden)
_EXCHANGE = '''
def exchange(t):
    """[every rank's t] in rank order, through isend/recv."""
    rank, world = dist.get_rank(), dist.get_world_size()
    out = [None] * world
    out[rank] = t
    for step in range(1, world):
        buf = torch.empty_like(t)
        req = dist.isend(t.contiguous(), (rank + step) % world)
        dist.recv(buf, (rank - step) % world)
        req.wait()
        out[(rank - step) % world] = buf
    return out
'''
HEAD = "import torch\nimport torch.distributed as dist\nimport torch.nn.functional as F\n" + _EXCHANGE

ALLREDUCE_DECODE = {
    # the sum without the previous rank's tensor (at W = 2: no peer at all)
    "ard_skip_rank": HEAD + '''
def solution(x):
    parts = exchange(x)
    skip = (dist.get_rank() - 1) % dist.get_world_size()
    x.copy_(sum(p.float() for q, p in enumerate(parts) if q != skip).to(x.dtype))
    return x
''',
    # honest: fp32 sum in reverse rank order, in place
    "ard_honest": HEAD + '''
def solution(x):
    parts = exchange(x)
    x.copy_(sum(p.float() for p in reversed(parts)).to(x.dtype))
    return x
''',
}

AGV = {
    # an honest gathering into blocks ordered by descending rank
    "agv_wrong_order": HEAD + '''
def solution(x, y, count):
    return _agv(x, y, count, order=lambda w: list(reversed(range(w))))
''',
    # honest (through collectives and a host read of the counts, which the task forbids but the
    # harness cannot see: the point here is the oracle)
    "agv_honest": HEAD + '''
def solution(x, y, count):
    return _agv(x, y, count, order=lambda w: list(range(w)))
''',
}
_AGV_BODY = '''
def _agv(x, y, count, order):
    world, rank = dist.get_world_size(), dist.get_rank()
    cap, hidden = x.shape
    counts = [torch.empty_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    c = [int(t) for t in counts]
    xs = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(xs, x)
    gathered = torch.zeros(world * cap, hidden, dtype=x.dtype, device=x.device)
    gathered[:sum(c)] = torch.cat([xs[q][:c[q]] for q in order(world)])
    ysum = y.float()
    dist.all_reduce(ysum)
    reduced = torch.zeros(cap, hidden, dtype=y.dtype, device=y.device)
    start = sum(c[:rank])
    reduced[:c[rank]] = ysum[start:start + c[rank]].to(y.dtype)
    return gathered, reduced
'''
AGV = {k: v + _AGV_BODY for k, v in AGV.items()}

_GEMV_TAIL = '''
    h = new_residual.float()
    normed = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * norm_weight.float()).to(x.dtype)
    return normed, new_residual
'''
GEMV = {
    # one rank's partial left out
    "gemv_skip_rank": HEAD + '''
def solution(x, weight, residual, norm_weight):
    parts = exchange(F.linear(x, weight))
    skip = (dist.get_rank() + 1) % dist.get_world_size()
    new_residual = (sum(p.float() for q, p in enumerate(parts) if q != skip) + residual.float()).to(x.dtype)
''' + _GEMV_TAIL,
    # honest: float32 partials, float32 sum in reverse order, one rounding
    "gemv_honest_fp32": HEAD + '''
def solution(x, weight, residual, norm_weight):
    parts = exchange(x.float() @ weight.float().t())
    new_residual = (sum(reversed(parts)) + residual.float()).to(x.dtype)
''' + _GEMV_TAIL,
}

_HSDP_HEAD = HEAD + '''
def _shard(total, grad):
    world, rank = dist.get_world_size(), dist.get_rank()
    shards = world // 2
    n = grad.numel() // shards
    s = rank % shards
    return total[s * n:(s + 1) * n]
'''
HSDP = {
    # bfloat16 accumulation: every partial sum rounded to 8 bits
    "hsdp_bf16_acc": _HSDP_HEAD + '''
def solution(grad):
    total = torch.zeros_like(grad)
    for p in exchange(grad):
        total += p
    return (_shard(total, grad).float() / dist.get_world_size()).contiguous()
''',
    # honest: the flat exchange of raw bfloat16 (not the mesh), float32 sums in reverse order
    "hsdp_honest_flat": _HSDP_HEAD + '''
def solution(grad):
    total = sum(p.float() for p in reversed(exchange(grad)))
    return (_shard(total, grad) / dist.get_world_size()).contiguous()
''',
}

PLANTED = {"collective/ard_skip_rank", "collective/agv_wrong_order", "fusion/gemv_skip_rank", "utility/hsdp_bf16_acc"}
HONEST = {"collective/ard_honest", "collective/agv_honest", "fusion/gemv_honest_fp32", "utility/hsdp_honest_flat"}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("p49a")
    make_tree(root, ALLREDUCE_DECODE, base="collective/allreduce_decode")
    # its copies may call collectives (the planted ones are about the values, not the transport)
    make_tree(root, AGV, base="collective/all_gather_v_reduce_scatter_v",
              yaml_patch={"forbid": [], "no_cpu_candidate": None})
    make_tree(root, GEMV, base="fusion/decode_gemv_allreduce")
    problems, solutions = make_tree(root, HSDP, base="utility/hsdp_grad_sync")
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-timing=off")
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return by_problem(doc)


@pytest.mark.parametrize("pid", sorted(PLANTED))
def test_a_planted_wrong_kernel_fails_as_mismatch(report, pid):
    item = report[pid]
    assert (item["outcome"], item["failure"]) == ("failed", "mismatch"), explain(item)


@pytest.mark.parametrize("pid", sorted(HONEST))
def test_an_honest_kernel_on_another_path_passes(report, pid):
    assert report[pid]["outcome"] == "passed", explain(report[pid])
