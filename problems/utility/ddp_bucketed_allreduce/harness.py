import torch


def _shapes(size):
    # GPT-2-style parameters: token embedding, then per layer qkv/proj/fc1/fc2 weights with
    # biases and two layer norms, then the final layer norm
    h, v = size["hidden"], size["vocab"]
    layer = [
        (h,), (h,),               # ln_1 weight, bias
        (3 * h, h), (3 * h,),     # attention qkv
        (h, h), (h,),             # attention output projection
        (h,), (h,),               # ln_2 weight, bias
        (4 * h, h), (4 * h,),     # mlp fc1
        (h, 4 * h), (h,),         # mlp fc2
    ]
    return [(v, h)] + layer * size["layers"] + [(h,), (h,)]


def inputs(size, rank, world_size, gen, device, dtype):
    # per-rank scale, so that ranks differ in magnitude as well as in values
    u = torch.rand((), generator=gen, device=device, dtype=torch.float32) + 0.5
    return tuple(torch.randn(s, generator=gen, device=device, dtype=dtype).mul_(u) for s in _shapes(size))


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n = sum(torch.Size(s).numel() for s in _shapes(size))
    w = world_size
    return {
        "link_bytes": 2 * (w - 1) / w * n * e,
        "hbm_bytes": 2 * n * e,      # read every gradient, write every result
        "flops": n,                  # the average's adds and scale
    }
