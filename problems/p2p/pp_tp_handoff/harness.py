import torch

PP = 2


def inputs(size, rank, world_size, gen, device, dtype):
    n, h = size["tokens"], size["hidden"]
    tp = world_size // PP
    assert world_size % PP == 0 and n % tp == 0
    return (torch.randn(n // tp, h, generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, h = size["tokens"], size["hidden"]
    tp = world_size // PP
    return {
        # every rank must receive the whole [N, H] from other ranks (its shard to the next
        # stage, (TP-1)/TP of it inside the group): N*H per rank either way
        "link_bytes": n * h * e,
        "hbm_bytes": (n // tp + n) * h * e,     # read the shard, write [N, H]
        "flops": 0,
    }
