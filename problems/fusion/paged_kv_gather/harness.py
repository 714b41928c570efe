import torch


def inputs(size, rank, world_size, gen, device, dtype):
    nb, bs, h, d = size["num_blocks"], size["block_size"], size["kv_heads"], size["head_dim"]
    k_cache = torch.randn(nb, bs, h, d, generator=gen, device=device, dtype=dtype)
    v_cache = torch.randn(nb, bs, h, d, generator=gen, device=device, dtype=dtype)
    block_table = torch.randint(0, world_size * nb, (size["batch"], size["max_blocks"]),
                                generator=gen, device=device, dtype=torch.int64)
    return k_cache, v_cache, block_table


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    bs, h, d = size["block_size"], size["kv_heads"], size["head_dim"]
    entries = size["batch"] * size["max_blocks"]
    kv_block = 2 * bs * h * d * e                # one block of k and v
    w = world_size
    return {
        # expected share of requested blocks that live on another rank (uniform block ids)
        "link_bytes": (w - 1) / w * entries * kv_block,
        "hbm_bytes": 2 * entries * kv_block,     # read every requested block, write the result
        "flops": 0,
    }
