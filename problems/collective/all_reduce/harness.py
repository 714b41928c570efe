import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    return (exact_values((size["n"],), gen, device, dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["n"], world_size
    return {
        "link_bytes": 2 * (w - 1) / w * n * e,   # reduce-scatter + all-gather
        "hbm_bytes": 2 * n * e,                  # read x, write out
        "flops": (w - 1) / w * n,                # this rank's share of the adds
    }
