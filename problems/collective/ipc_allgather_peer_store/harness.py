import torch


def inputs(size, rank, world_size, gen, device, dtype):
    return (torch.randn(size["n"], generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype):
    b = size["n"] * torch.tensor([], dtype=dtype).element_size()
    w = world_size
    # x goes to each of the W-1 peers. HBM: read x, write y (W slices), and the W-1 received
    # slices are written into the receive buffer and read back out of it.
    return {"link_bytes": (w - 1) * b, "hbm_bytes": (1 + w + 2 * (w - 1)) * b, "flops": 0}
