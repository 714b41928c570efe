import torch


def inputs(size, rank, world_size, gen, device, dtype):
    s, h, d = size["seq_local"], size["heads"], size["head_dim"]
    assert h % world_size == 0
    return (torch.randn(world_size * s, h // world_size, d, generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n = size["seq_local"] * size["heads"] * size["head_dim"]   # elements per rank, in and out
    w = world_size
    return {
        "link_bytes": (w - 1) / w * n * e,   # every token block but our own leaves once
        "hbm_bytes": 2 * n * e,              # read x, write out
        "flops": 0,
    }
