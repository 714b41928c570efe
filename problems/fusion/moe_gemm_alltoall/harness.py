import torch


def inputs(size, rank, world_size, gen, device, dtype):
    e, c, f, h = size["local_experts"], size["capacity"], size["ffn"], size["hidden"]
    x = torch.randn(e, world_size * c, f, generator=gen, device=device, dtype=dtype)
    # w ~ N(0, 1/F) keeps every output element ~ N(0, 1)
    w = (torch.randn(e, f, h, generator=gen, device=device, dtype=torch.float32) / f ** 0.5).to(dtype)
    return x, w


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    e, c, f, h, w = size["local_experts"], size["capacity"], size["ffn"], size["hidden"], world_size
    block = e * c * h                             # outputs for one destination
    return {
        "link_bytes": (w - 1) * block * el,       # every destination's block but our own leaves once
        "hbm_bytes": (e * w * c * f + e * f * h + w * block) * el,   # read x and w, write out
        "flops": 2 * e * w * c * f * h,
    }
