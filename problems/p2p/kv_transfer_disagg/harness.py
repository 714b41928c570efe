import torch

FLAG_TAGS = 1 << 30        # stale flags lie below it, this call's tag at or above it


def inputs(size, rank, world_size, gen, device, dtype):
    layers, nb, bs, h, d, n = (size[k] for k in ("layers", "num_blocks", "block_size", "kv_heads", "head_dim", "blocks"))
    kv_cache = torch.randn(layers, 2, nb, bs, h, d, generator=gen, device=device, dtype=dtype)
    # the request's blocks in this rank's cache: distinct ids, a different table on every rank
    block_ids = torch.randperm(nb, generator=gen, device=device)[:n]
    flags = torch.randint(0, FLAG_TAGS, (layers,), generator=gen, device=device, dtype=torch.int32)
    tag = torch.randint(FLAG_TAGS, 2 * FLAG_TAGS - 1, (1,), generator=gen, device=device, dtype=torch.int32)
    return kv_cache, block_ids, flags, tag


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    payload = size["layers"] * 2 * size["blocks"] * size["block_size"] * size["kv_heads"] * size["head_dim"] * e
    return {
        "link_bytes": payload,                   # the prefill rank sends it, the decode rank receives it
        "hbm_bytes": payload,                    # read on one side, written on the other
        "flops": 0,
    }
