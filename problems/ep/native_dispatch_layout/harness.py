import torch


def inputs(size, rank, world_size, gen, device, dtype):
    t, e, k, r = size["tokens"], size["experts"], size["topk"], size["ranks"]
    assert e % r == 0 and k <= e
    # K distinct experts per token; a random preference per expert makes the loads uneven
    bias = torch.rand(e, generator=gen, device=device)
    scores = torch.rand(t, e, generator=gen, device=device) + bias
    topk_ids = scores.topk(k, dim=1).indices
    # about 1 slot in 16 is unused (-1), as when a token's later choices are dropped
    drop = torch.rand(t, k, generator=gen, device=device) < 1 / 16
    topk_ids = topk_ids.masked_fill(drop, -1).contiguous()
    return topk_ids, e, r


def cost(size, world_size, dtype):
    t, e, k, r = size["tokens"], size["experts"], size["topk"], size["ranks"]
    return {
        "link_bytes": 0,                                         # one GPU: nothing crosses a link
        "hbm_bytes": t * k * 8 + t * r + (e + r) * 4,           # read topk_ids; write the mask and the counts
        "flops": t * k,
    }
