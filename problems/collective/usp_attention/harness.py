import torch


def inputs(size, rank, world_size, gen, device, dtype):
    s, hq, hkv, d = size["seq_local"], size["q_heads"], size["kv_heads"], size["head_dim"]
    q = torch.randn(s, hq, d, generator=gen, device=device, dtype=dtype)
    k = torch.randn(s, hkv, d, generator=gen, device=device, dtype=dtype)
    # v gets a per-rank, per-head, per-channel offset in [-2, 2]: the output is then close to the
    # average offset over all ranks, so a candidate that skips or double-counts a rank's block,
    # or mixes up heads, is off by O(0.1..1), far above the tolerance
    offset = torch.rand(1, hkv, d, generator=gen, device=device, dtype=torch.float32) * 4 - 2
    v = (torch.randn(s, hkv, d, generator=gen, device=device, dtype=torch.float32) + offset).to(dtype)
    return q, k, v


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    s, hq, hkv, d, w = size["seq_local"], size["q_heads"], size["kv_heads"], size["head_dim"], world_size
    q_bytes, kv_bytes = s * hq * d * e, 2 * s * hkv * d * e
    return {
        # the cheaper of the two ways a rank can meet every key: head-parallel (Ulysses at degree
        # W: all but 1/W of q, k, v leave and of the output come back) or every peer's k and v
        # reaching it (a ring or all-gather); USP's mix of the two moves more than the cheaper
        "link_bytes": min((w - 1) / w * (2 * q_bytes + kv_bytes), (w - 1) * kv_bytes),
        "hbm_bytes": 2 * q_bytes + kv_bytes,              # read q, k, v; write out
        "flops": 4 * hq * s * (w * s) * d,                 # QK^T and PV over the whole sequence
    }
