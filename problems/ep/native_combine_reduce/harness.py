import math

import torch


def inputs(size, rank, world_size, gen, device, dtype):
    t, h, k = size["tokens"], size["hidden"], size["topk"]
    rows = t * k   # the average load: W*T*K (token, expert) pairs spread over W ranks
    expert_out = torch.randn(rows, h, generator=gen, device=device, dtype=dtype)
    weights = torch.rand(rows, generator=gen, device=device, dtype=torch.float32)
    # uneven splits over owners: sources drawn with a per-rank skew u**a, a in [0.4, 2.5)
    skew = torch.rand((), generator=gen, device=device) * 2.1 + 0.4
    u = torch.rand(rows, generator=gen, device=device)
    src = (u.pow(skew) * world_size).long().clamp_(max=world_size - 1)
    tok = torch.randint(0, t, (rows,), generator=gen, device=device)
    key = torch.sort(src * t + tok).values
    return expert_out, weights, key // t, key % t, t


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    t, h, k, w = size["tokens"], size["hidden"], size["topk"], world_size
    rows = t * k
    pairs = w * t * (1 - math.exp(-rows / (w * t)))    # expected distinct (owner, token) pairs of one rank's rows
    return {
        # the rows for other ranks, as bfloat16 rows with weight and index or as fp32 sums per
        # (owner, token) pair, whichever is smaller
        "link_bytes": (w - 1) / w * min(rows * (h * el + 12), pairs * (h * 4 + 4)),
        # read the rows, weights and indices; write this rank's tokens
        "hbm_bytes": rows * (h * el + 20) + t * h * el,
        "flops": 2 * rows * h,
    }
