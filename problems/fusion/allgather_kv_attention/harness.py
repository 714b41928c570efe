import torch


def inputs(size, rank, world_size, gen, device, dtype):
    b, hq, hkv, c, d = size["batch"], size["q_heads"], size["kv_heads"], size["chunk"], size["head_dim"]
    assert hq % hkv == 0
    q = torch.randn(b, hq, 2 * c, d, generator=gen, device=device, dtype=dtype)
    k = torch.randn(b, hkv, 2 * c, d, generator=gen, device=device, dtype=dtype)
    # per-rank, per-head, per-channel offset in [-2, 2] on v: a skipped, double-counted or wrongly
    # masked key block moves the output by O(0.1..1), far above the tolerance
    offset = torch.rand(1, hkv, 1, d, generator=gen, device=device, dtype=torch.float32) * 4 - 2
    v = (torch.randn(b, hkv, 2 * c, d, generator=gen, device=device, dtype=torch.float32) + offset).to(dtype)
    return q, k, v


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    b, hq, hkv, c, d = size["batch"], size["q_heads"], size["kv_heads"], size["chunk"], size["head_dim"]
    w = world_size
    q_bytes = b * hq * 2 * c * d * e
    kv_bytes = 2 * b * hkv * 2 * c * d * e       # this rank's k and v
    pairs = 2 * w * c * c                        # causal (query, key) pairs of the two chunks
    return {
        "link_bytes": (w - 1) * kv_bytes,        # this rank's k and v reach every peer
        "hbm_bytes": 2 * q_bytes + w * kv_bytes, # read q and the whole sequence's k, v; write out
        "flops": 4 * b * hq * pairs * d,         # QK^T and PV over the unmasked pairs
    }
