import torch


def inputs(size, rank, world_size, gen, device, dtype):
    t, h, f = size["tokens"], size["hidden"], size["ffn"]
    assert t % world_size == 0 and f % world_size == 0
    x = torch.randn(t // world_size, h, generator=gen, device=device, dtype=dtype)
    # w ~ N(0, 1/hidden): pre-activations ~N(0, 1), so GeLU's curved region is exercised
    w = (torch.randn(h, f // world_size, generator=gen, device=device, dtype=torch.float32) / h ** 0.5).to(dtype)
    return x, w


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    t, h, f, w = size["tokens"], size["hidden"], size["ffn"], world_size
    m, n = t // w, f // w
    return {
        "link_bytes": (w - 1) * m * h * e,                # x goes to every peer
        "hbm_bytes": (m * h + h * n + t * n) * e,         # read x and w, write the output
        "flops": 2 * t * h * n + 8 * t * n,               # GEMM + GeLU
    }
