import torch


def inputs(size, rank, world_size, gen, device, dtype):
    t, v = size["tokens"], size["vocab"]
    assert t % world_size == 0 and v % world_size == 0
    # logits with a spread like a trained LM head (std 3), different on every rank's vocab slice
    logits = (3 * torch.randn(t, v // world_size, generator=gen, device=device, dtype=torch.float32)).to(dtype)
    # this rank's T/W consecutive targets, uniform over the whole vocabulary (so they land on
    # every rank's slice)
    target_shard = torch.randint(0, v, (t // world_size,), generator=gen, device=device, dtype=torch.int64)
    return logits, target_shard


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    t, v, w = size["tokens"], size["vocab"], world_size
    n = t * (v // w)
    return {
        # gather the targets, all-reduce max, all-reduce (target logit, sum of exp)
        "link_bytes": (w - 1) / w * t * 8 + 2 * (w - 1) / w * 3 * t * 4,
        "hbm_bytes": n * e + t // w * 8 + t * 4,      # read the logits once, write the loss
        "flops": 4 * n,                               # max, subtract, exp, sum
    }
