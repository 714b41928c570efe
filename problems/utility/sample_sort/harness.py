import torch


def inputs(size, rank, world_size, gen, device, dtype):
    n = size["n"]
    assert n % (world_size * world_size) == 0
    return (torch.randn(n, generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["n"], world_size
    return {
        "link_bytes": (w - 1) / w * n * e,   # expected share of keys that leave this rank
        "hbm_bytes": 2 * n * e,              # read keys, write the (expected n) bucket
        "flops": 0,                          # comparisons, not flops
        "messages": 2,                       # samples for the splitters, then the keys they route
    }
