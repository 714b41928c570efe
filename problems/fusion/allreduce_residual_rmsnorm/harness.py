import torch


def _exact_values(shape, gen, device, dtype):
    # Roughly N(0, 1), but rounded to multiples of 1/8 in [-4, 4]: every partial sum of up to
    # 8 such values is exact in bfloat16, so every all-reduce order gives identical bits and
    # the only rounding left is the one of (sum + residual), which every correct code does.
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return x.mul_(8).round_().clamp_(-32, 32).div_(8).to(dtype)


def inputs(size, rank, world_size, gen, device, dtype):
    t, h = size["tokens"], size["hidden"]
    x = _exact_values((t, h), gen, device, dtype)
    # gen is per rank, so residual and weight differ per rank (the task text says so)
    residual = torch.randn(t, h, generator=gen, device=device, dtype=dtype)
    weight = (1 + 0.25 * torch.randn(h, generator=gen, device=device, dtype=torch.float32)).to(dtype)
    return x, residual, weight


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    t, h, w = size["tokens"], size["hidden"], world_size
    n = t * h
    return {
        "link_bytes": 2 * (w - 1) / w * n * e,        # all-reduce of x
        "hbm_bytes": 4 * n * e + h * e,               # read x, residual, weight; write 2 outputs
        "flops": (w - 1) / w * n + 5 * n,             # reduce adds + add, square, sum, 2 scales
    }
