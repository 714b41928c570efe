import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    return (exact_values((size["n"],), gen, device, dtype),)     # sums exact in any order


def cost(size, world_size, dtype):
    b = size["n"] * torch.tensor([], dtype=dtype).element_size()
    w = world_size
    return {"link_bytes": (w - 1) * b,             # one-shot: every peer's data comes over the links
            "hbm_bytes": (w + 2) * b, "flops": (w - 1) * size["n"]}
