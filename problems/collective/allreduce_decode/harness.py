import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    # any summation order over up to 8 ranks is exact on this grid (harnesslib.exact_values)
    return (exact_values((size["n"],), gen, device, dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["n"], world_size
    return {
        # the least any algorithm moves (reduce-scatter + all-gather); one-shot moves (W-1) n e
        # in one message, two-shot this in two: one dependent message is all a bound may assume
        "link_bytes": 2 * (w - 1) / w * n * e,
        "hbm_bytes": 2 * n * e,                  # read x, write x
        "flops": (w - 1) / w * n,                # this rank's share of the adds
        "messages": 1,
    }
