import torch

from pytest_kernelbench.harnesslib import rank_hit_probability


def inputs(size, rank, world_size, gen, device, dtype):
    t, h, e, k = size["tokens"], size["hidden"], size["experts"], size["topk"]
    assert e % world_size == 0 and k <= e
    tokens = torch.randn(t, h, generator=gen, device=device, dtype=dtype)
    # K distinct experts per token, uniformly at random (top-k of random router scores)
    scores = torch.rand(t, e, generator=gen, device=device)
    topk_ids = scores.topk(k, dim=1).indices.contiguous()
    return tokens, topk_ids, e


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    t, h, w = size["tokens"], size["hidden"], world_size
    p = rank_hit_probability(size["experts"], size["topk"], w)
    row = h * el
    return {
        # expected token copies leaving this rank for the W-1 other ranks (+ the counts)
        "link_bytes": (w - 1) * p * t * row + (w - 1) * 8,
        # read tokens + routing once, write the expected W*T*p received rows + counts
        "hbm_bytes": t * row + t * size["topk"] * 8 + w * p * t * row + w * 8,
        "flops": 0,
    }
