import torch


def inputs(size, rank, world_size, gen, device, dtype):
    t, e, k = size["tokens"], size["experts"], size["topk"]
    assert e % world_size == 0 and k <= e
    # the counts of a real routing: K distinct experts per token, uneven loads (a per-rank preference)
    bias = torch.rand(e, generator=gen, device=device)
    topk_ids = (torch.rand(t, e, generator=gen, device=device) + bias).topk(k, dim=1).indices
    per_expert = torch.zeros(e, dtype=torch.int32, device=device)
    per_expert.index_add_(0, topk_ids.flatten(), torch.ones(t * k, dtype=torch.int32, device=device))
    in_rank = torch.zeros(t, world_size, dtype=torch.int32, device=device)
    in_rank.scatter_(1, topk_ids // (e // world_size), 1)
    per_rank = in_rank.sum(dim=0, dtype=torch.int32)
    return per_rank, per_expert


def cost(size, world_size, dtype):
    e, w = size["experts"], world_size
    local = e // w
    return {
        "link_bytes": (w - 1) * (w + local) * 4,                # this rank's message to every peer
        "hbm_bytes": (w + e) * 4 + (w * w + 2 * w * local + local) * 4 + w * (w + local) * 4,
        "flops": w * w + 2 * w * local,
    }
