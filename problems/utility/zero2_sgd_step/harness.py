import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    n = size["numel"]
    assert n % world_size == 0
    shard = n // world_size
    grads = exact_values((n,), gen, device, dtype)
    param_shard = torch.randn(shard, generator=gen, device=device, dtype=torch.float32)
    momentum_buf = torch.randn(shard, generator=gen, device=device, dtype=torch.float32)
    return grads, param_shard, momentum_buf, 0.01, 0.9, 0.01


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["numel"], world_size
    shard = n // w
    return {
        "link_bytes": (w - 1) * shard * e,             # reduce-scatter of the gradients
        "hbm_bytes": n * e + 4 * shard * 4,            # read grads, p, buf; write p, buf
        "flops": (w - 1) * shard + 6 * shard,
    }
