import torch


def inputs(size, rank, world_size, gen, device, dtype):
    return (torch.randn(size["n"], generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype):
    b = size["n"] * torch.tensor([], dtype=dtype).element_size()
    return {"link_bytes": b,                       # this rank's x over the link to the next rank
            "hbm_bytes": 3 * b}                    # read x, read the receive buffer, write y
