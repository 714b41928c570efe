import torch


def inputs(size, rank, world_size, gen, device, dtype):
    return (torch.randn(size["tokens"], size["hidden"], generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype):
    b = size["tokens"] * size["hidden"] * torch.tensor([], dtype=dtype).element_size()
    return {"link_bytes": b,                       # a middle stage sends x once (and receives once)
            "hbm_bytes": 4 * b}                    # read x, write the staging, the peer's read of it, write y
