import torch


def inputs(size, rank, world_size, gen, device, dtype):
    return (torch.randn(size["n"], generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype):
    b = size["n"] * torch.tensor([], dtype=dtype).element_size()
    w = world_size
    return {"link_bytes": (w - 1) * b,             # x stored into every other rank
            "hbm_bytes": b + 3 * w * b}            # read x, the W parts landing here, read them, write y
