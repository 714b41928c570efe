import torch


def inputs(size, rank, world_size, gen, device, dtype):
    return (torch.randn(size["n"], generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n = size["n"]
    return {
        "link_bytes": n * e,       # x crosses one link once
        "hbm_bytes": 2 * n * e,    # read x, write out
        "flops": 0,
    }
