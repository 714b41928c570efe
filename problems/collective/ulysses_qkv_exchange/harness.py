import torch


def inputs(size, rank, world_size, gen, device, dtype):
    s, hq, hkv, d = size["seq_local"], size["q_heads"], size["kv_heads"], size["head_dim"]
    assert hq % world_size == 0 and hkv % world_size == 0 and hq % hkv == 0
    q = torch.randn(s, hq, d, generator=gen, device=device, dtype=dtype)
    k = torch.randn(s, hkv, d, generator=gen, device=device, dtype=dtype)
    v = torch.randn(s, hkv, d, generator=gen, device=device, dtype=dtype)
    return q, k, v


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n = size["seq_local"] * (size["q_heads"] + 2 * size["kv_heads"]) * size["head_dim"]
    w = world_size
    return {
        "link_bytes": (w - 1) / w * n * e,   # every head group but our own leaves once
        "hbm_bytes": 2 * n * e,              # read q, k, v; write the three outputs
        "flops": 0,
    }
