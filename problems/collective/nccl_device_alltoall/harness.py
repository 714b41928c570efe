import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    assert size["n"] % (world_size * 8) == 0
    return (exact_values((size["n"],), gen, device, dtype),)     # the reduce-scatter sums exact in any order


def cost(size, world_size, dtype):
    b = size["n"] * torch.tensor([], dtype=dtype).element_size()
    w = world_size
    # Both outputs need the same W - 1 chunks of the peers (chunk r of every peer's x): they cross
    # the links once. HBM: read x, write y and z, and each of those chunks is written into a
    # window (x is not registered: staged here or stored into the receiver's) and read back once.
    return {"link_bytes": (w - 1) / w * b,
            "hbm_bytes": (2 + 1 / w + 2 * (w - 1) / w) * b,
            "flops": (w - 1) * size["n"] / w}
