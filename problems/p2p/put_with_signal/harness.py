import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    return (exact_values((size["n"],), gen, device, dtype),)      # x + received is exact in bfloat16


def cost(size, world_size, dtype):
    b = size["n"] * torch.tensor([], dtype=dtype).element_size()
    return {"link_bytes": b,                       # this rank's x put into the next rank
            "hbm_bytes": 4 * b,                    # read x, the put landing here, read it back, write y
            "flops": size["n"]}
