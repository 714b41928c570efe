import torch


def inputs(size, rank, world_size, gen, device, dtype):
    t, v = size["tokens"], size["vocab"]
    assert v % world_size == 0 and size["k"] <= v // world_size
    # std-3 logits rounded to bfloat16: equal values are frequent among the top candidates
    # (the tie rule is exercised), and they are spread over every rank's vocabulary slice
    logits = (3 * torch.randn(t, v // world_size, generator=gen, device=device, dtype=torch.float32)).to(dtype)
    return logits, size["k"]


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    t, v, k, w = size["tokens"], size["vocab"], size["k"], world_size
    n = t * (v // w)
    return {
        "link_bytes": (w - 1) * t * (2 * k + 2) * 4,    # this rank's candidates and statistics to every peer
        "hbm_bytes": n * e + t * k * (4 + 8),           # read the logits once, write the outputs
        "flops": 4 * n,                                 # top-k compare, subtract, exp, sum
    }
