import torch


def inputs(size, rank, world_size, gen, device, dtype):
    m, s = size["micro_batches"], size["max_tokens"]
    # per-rank loss level (different data shards) plus per-micro-batch spread, and token
    # counts that vary widely, so that neither a local mean nor an unweighted mean passes
    level = torch.rand((), generator=gen, device=device, dtype=dtype) * 2 + 1
    losses = torch.rand(m, generator=gen, device=device, dtype=dtype) * 2 - 1 + level
    token_counts = torch.randint(1, s + 1, (m,), generator=gen, device=device, dtype=torch.int64)
    return losses, token_counts


def cost(size, world_size, dtype):
    m, w = size["micro_batches"], world_size
    return {
        "link_bytes": 2 * (w - 1) / w * 2 * 4,   # all-reduce of two floats
        "hbm_bytes": m * (4 + 8) + 4,
        "flops": 3 * m,
    }
