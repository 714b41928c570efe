"""Issue 49 (10, 12, 20): the oracles of p2p/rl_weight_reshard, p2p/kv_transfer_disagg and
utility/kv_offload_pinned fail planted wrong kernels as `mismatch` and pass honest ones.

One inner run on CPU (gloo, tiny size, W = 2; W = 1 for the one-GPU offload) judges every
candidate below, each on a copy of its problem that forbids nothing (the real ones forbid every
torch.distributed transport, so on CPU only their references run): the honest candidates show
that a failure of their planted twins is the bug, not the copy.
"""
from __future__ import annotations

import pytest
from kbrun import by_problem, explain, make_tree, run

pytestmark = pytest.mark.e2e      # every test here runs an inner pytest or ranks (tests/e2e_guard.py)

RESHARD = '''import torch
import torch.distributed as dist


def solution(shard, hidden, heads, kv_heads, head_dim, ffn):
    w, t = dist.get_world_size(), dist.get_rank()
    full = shard.new_empty(w * shard.numel())
    dist.all_gather_into_tensor(full, shard)
    e, hq, hkv, d, f = hidden, heads, kv_heads, head_dim, ffn
    sizes = [hq * d * e, hkv * d * e, hkv * d * e, e * hq * d, f * e, f * e, e * f, e]
    q, k, v, o, g, u, down, norm = full[:sum(sizes)].split(sizes)
    rows = lambda x: x.view(-1, e).chunk(w)[t]          # noqa: E731
    qkv = QKV
    gate_up = torch.cat([rows(g), rows(u)])
    return tuple(x.contiguous().clone() for x in (qkv, o.view(e, -1).chunk(w, 1)[t], gate_up,
                                                  down.view(e, -1).chunk(w, 1)[t], norm))
'''
RESHARD_HONEST = RESHARD.replace("QKV", "torch.cat([rows(q), rows(k), rows(v)])")
# the fused matrix split evenly by rows: right shape, but rank 0 gets all of q's first heads
RESHARD_FUSED_SPLIT = RESHARD.replace("QKV", "torch.cat([q, k, v]).view(-1, e).chunk(w)[t]")

TRANSFER = '''import torch
import torch.distributed as dist


def solution(kv_cache, block_ids, flags, tag):
    rank = dist.get_rank()
    if rank % 2 == 0:
        dist.send(block_ids, rank + 1)
        dist.send(kv_cache[:, :, block_ids].contiguous(), rank + 1)
        return None
    src_ids = torch.empty_like(block_ids)
    dist.recv(src_ids, rank - 1)
    buf = kv_cache[:, :, block_ids].clone()
    dist.recv(buf, rank - 1)
    kv_cache[:, :, TABLE] = buf
    FLAGS
    return None
'''
TRANSFER_HONEST = TRANSFER.replace("TABLE", "block_ids").replace("FLAGS", "flags.copy_(tag.expand_as(flags))")
# the blocks land where they were on the prefill rank, not in the decode rank's own table
TRANSFER_WRONG_TABLE = TRANSFER.replace("TABLE", "src_ids").replace("FLAGS", "flags.copy_(tag.expand_as(flags))")
# the blocks land, but no layer is ever flagged complete (the flags keep last call's values)
TRANSFER_NO_FLAGS = TRANSFER.replace("TABLE", "block_ids").replace("FLAGS", "pass")

OFFLOAD = '''import torch


def solution(kv_cache, offload_ids, host_in, onload_ids):
    n, (layers, two, nb, bs, h, d) = offload_ids.numel(), kv_cache.shape
    out = OUT
    ONLOAD
    return out
'''
_OUT = "kv_cache[:, :, offload_ids].permute(2, 0, 1, 3, 4, 5).contiguous().cpu()"
_ONLOAD = "kv_cache[:, :, onload_ids] = host_in.to(kv_cache.device).permute(1, 2, 0, 3, 4, 5)"
OFFLOAD_HONEST = OFFLOAD.replace("OUT", _OUT).replace("ONLOAD", _ONLOAD)
# host blocks laid out [n, 2, L, ...] and reshaped: right shape, K/V and layers interleaved wrong
OFFLOAD_LAYOUT = OFFLOAD.replace("OUT", "kv_cache[:, :, offload_ids].permute(2, 1, 0, 3, 4, 5).reshape(n, layers, two, bs, h, d).cpu()") \
    .replace("ONLOAD", _ONLOAD)
# the offload half only: the host blocks never reach the cache
OFFLOAD_NO_ONLOAD = OFFLOAD.replace("OUT", _OUT).replace("ONLOAD", "pass")

CANDIDATES = {
    "p2p/rl_weight_reshard": {"reshard_honest": RESHARD_HONEST, "reshard_fused_split": RESHARD_FUSED_SPLIT},
    "p2p/kv_transfer_disagg": {"transfer_honest": TRANSFER_HONEST, "transfer_wrong_table": TRANSFER_WRONG_TABLE,
                               "transfer_no_flags": TRANSFER_NO_FLAGS},
    "utility/kv_offload_pinned": {"offload_honest": OFFLOAD_HONEST, "offload_layout": OFFLOAD_LAYOUT,
                                  "offload_no_onload": OFFLOAD_NO_ONLOAD},
}
PLANTED = {   # candidate -> what its mismatch message must name
    "p2p/reshard_fused_split": "out[0]: values differ",    # qkv_proj, the first output
    "p2p/transfer_wrong_table": "in-place result wrong",
    "p2p/transfer_no_flags": "in-place result wrong",
    "utility/offload_layout": "out: values differ",
    "utility/offload_no_onload": "in-place result wrong",
}


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("p49e")
    for base, cands in CANDIDATES.items():
        # the copies forbid nothing, so gloo's transports are legal candidates on CPU
        problems, solutions = make_tree(root, cands, base=base, yaml_patch={"forbid": [], "no_cpu_candidate": None})
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-cpu-ranks=2", "--kb-timing=off",
                    "-n", "2")
    assert doc is not None, proc.stdout + proc.stderr
    return by_problem(doc)


@pytest.mark.parametrize("name", ["p2p/reshard_honest", "p2p/transfer_honest", "utility/offload_honest"])
def test_an_honest_kernel_passes(judged, name):
    assert judged[name]["outcome"] == "passed", explain(judged[name])


def test_the_world_sizes_are_the_ones_a_cpu_run_gives(judged):
    assert judged["p2p/reshard_honest"]["world_size"] == 2 and judged["p2p/transfer_honest"]["world_size"] == 2
    assert judged["utility/offload_honest"]["world_size"] == 1


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_wrong_kernel_fails_as_mismatch(judged, name):
    it = judged[name]
    assert (it["outcome"], it["failure"]) == ("failed", "mismatch"), explain(it)
    assert PLANTED[name] in it["message"], it["message"]
