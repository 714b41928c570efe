import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    t, h = size["tokens"], size["hidden"]
    assert t % world_size == 0
    x = exact_values((t, h), gen, device, dtype)
    # gen is per rank, so the gain differs per rank (the task text says so)
    weight = (1 + 0.25 * torch.randn(h, generator=gen, device=device, dtype=torch.float32)).to(dtype)
    return x, weight


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    t, h, w = size["tokens"], size["hidden"], world_size
    n = t * h
    return {
        "link_bytes": (w - 1) / w * n * e,                # reduce-scatter of x
        "hbm_bytes": n * e + n // w * e + h * e,          # read x and weight, write the block
        "flops": (w - 1) / w * n + 4 * n / w,             # reduce adds + square, sum, 2 scales
    }
