import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    n = size["numel"]
    assert n % world_size == 0
    param_shard = torch.randn(n // world_size, generator=gen, device=device, dtype=dtype)
    full_grad = exact_values((n,), gen, device, dtype)
    return param_shard, full_grad


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["numel"], world_size
    shard = n // w
    return {
        "link_bytes": 2 * (w - 1) * shard * e,        # all-gather + reduce-scatter
        "hbm_bytes": (shard + n + n + shard) * e,     # read shard and grad, write both outputs
        "flops": (w - 1) * shard,
    }
