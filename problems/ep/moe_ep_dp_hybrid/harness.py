import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    assert world_size % 2 == 0
    ep = world_size // 2
    tokens = torch.randn(ep * size["capacity"], size["hidden"], generator=gen, device=device, dtype=dtype)
    expert_grad = exact_values((size["expert_numel"],), gen, device, dtype)
    dense_grad = exact_values((size["dense_numel"],), gen, device, dtype)
    return tokens, expert_grad, dense_grad


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    w, ep, dp = world_size, world_size // 2, 2
    chunk = size["capacity"] * size["hidden"]
    ne, nd = size["expert_numel"], size["dense_numel"]
    return {
        "link_bytes": ((ep - 1) * chunk + 2 * (dp - 1) / dp * ne + 2 * (w - 1) / w * nd) * el,
        "hbm_bytes": (2 * ep * chunk + 2 * ne + 2 * nd) * el,
        "flops": (dp - 1) / dp * ne + (w - 1) / w * nd,
    }
