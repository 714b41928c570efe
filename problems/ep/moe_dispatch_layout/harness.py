import torch


def inputs(size, rank, world_size, gen, device, dtype):
    t, e, k = size["tokens"], size["experts"], size["topk"]
    assert e % world_size == 0 and k <= e
    # K distinct experts per token; a per-rank preference makes the loads uneven
    bias = torch.rand(e, generator=gen, device=device)
    scores = torch.rand(t, e, generator=gen, device=device) + bias
    topk_ids = scores.topk(k, dim=1).indices.contiguous()
    return topk_ids, e


def cost(size, world_size, dtype):
    t, e, k, w = size["tokens"], size["experts"], size["topk"], world_size
    return {
        # each peer needs this rank's count for it and the counts of its E/W experts
        "link_bytes": (w - 1) * (1 + e // w) * 8,
        # read topk_ids; write the [T, W] mask and slots, and the small count vectors
        "hbm_bytes": t * k * 8 + t * w * (1 + 8) + (2 * e + 2 * w) * 8,
        "flops": t * k,
    }
