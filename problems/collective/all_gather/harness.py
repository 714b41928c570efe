import torch


def inputs(size, rank, world_size, gen, device, dtype):
    return (torch.randn(size["n"], generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["n"], world_size
    return {
        "link_bytes": (w - 1) * n * e,     # x goes to each of the W-1 peers (or is relayed)
        "hbm_bytes": n * e + w * n * e,    # read x, write W*n
        "flops": 0,
    }
