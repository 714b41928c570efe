import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    return (exact_values((size["n"],), gen, device, dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["n"], world_size
    return {
        # rank 0 must take in n elements' worth of partial sums; a reduce-scatter among the
        # others followed by a gather to the root sends about n elements from each of them
        "link_bytes": n * e,
        "hbm_bytes": 2 * n * e,        # read x, write the sum on the root
        "flops": (w - 1) / w * n,
    }
