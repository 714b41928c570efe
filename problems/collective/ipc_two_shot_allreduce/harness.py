import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    return (exact_values((size["n"],), gen, device, dtype),)     # sums exact in any order


def cost(size, world_size, dtype):
    b = size["n"] * torch.tensor([], dtype=dtype).element_size()
    w = world_size
    # two-shot: (W-1)/W of x leaves for the reduce-scatter, (W-1)/W of y arrives for the all-gather.
    # HBM: read x, write the staging copy, serve W chunk reads of it, write the reduced chunk and y,
    # serve the peers' reads of the reduced chunk: 5 x bytes in all.
    # Two dependent messages: the reduced chunk can be published only after every peer's chunk
    # arrived.
    return {"link_bytes": 2 * (w - 1) / w * b, "hbm_bytes": 5 * b, "flops": (w - 1) / w * size["n"], "messages": 2}

