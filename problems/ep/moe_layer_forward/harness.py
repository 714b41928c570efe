import math

import torch


def inputs(size, rank, world_size, gen, device, dtype):
    t, h, f, e, k = size["tokens"], size["hidden"], size["ffn"], size["experts"], size["topk"]
    assert e % world_size == 0 and k <= e
    local = e // world_size
    x = torch.randn(t, h, generator=gen, device=device, dtype=dtype)
    # a per-rank bias makes the expert loads uneven
    bias = torch.randn(e, generator=gen, device=device, dtype=torch.float32) * 0.5
    logits = torch.randn(t, e, generator=gen, device=device, dtype=torch.float32) + bias
    # N(0, 1/fan_in) weights keep activations O(1)
    w1 = (torch.randn(local, h, f, generator=gen, device=device, dtype=torch.float32) / h ** 0.5).to(dtype)
    w2 = (torch.randn(local, f, h, generator=gen, device=device, dtype=torch.float32) / f ** 0.5).to(dtype)
    return x, logits, w1, w2, k


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    t, h, f, e, k, w = size["tokens"], size["hidden"], size["ffn"], size["experts"], size["topk"], world_size
    local = e // w
    p_hit = 1.0 - math.comb(e - local, k) / math.comb(e, k)
    return {
        # each token once to every other rank hosting one of its experts, and back
        "link_bytes": 2 * (w - 1) * p_hit * t * h * el,
        # expert weights once, tokens in and out, routing logits
        "hbm_bytes": 2 * local * h * f * el + 2 * t * h * el + t * e * 4,
        # on average T*K pairs per rank, two GEMMs each
        "flops": 4 * t * k * h * f,
        "messages": 2,               # dispatch, then the combine of the experts' outputs
    }
