import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    t, h = size["tokens"], size["hidden"]
    x = exact_values((t, h), gen, device, dtype)            # the sum over ranks is exact in any order
    # gen is per rank, so residual and weight differ per rank (the task text says so)
    residual = torch.randn(t, h, generator=gen, device=device, dtype=dtype)
    weight = (1 + 0.25 * torch.randn(h, generator=gen, device=device, dtype=torch.float32)).to(dtype)
    return x, residual, weight


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    t, h, w = size["tokens"], size["hidden"], world_size
    n = t * h
    return {
        "link_bytes": (w - 1) * n * e,               # one-shot: every peer's x comes over the links
        "hbm_bytes": (w + 5) * n * e + h * e,        # stage x; read the W staged copies, residual, weight; write 2 outputs
        "flops": (w - 1) * n + 6 * n,                # reduce adds + add, square, sum, 2 scales
    }
