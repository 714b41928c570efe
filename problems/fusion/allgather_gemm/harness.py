import torch


def inputs(size, rank, world_size, gen, device, dtype):
    m, k, n = size["m"], size["k"], size["n_local"]
    x = torch.randn(m, k, generator=gen, device=device, dtype=dtype)
    # w ~ N(0, 1/k) keeps every output element ~ N(0, 1) whatever k is
    w = (torch.randn(k, n, generator=gen, device=device, dtype=torch.float32) / k ** 0.5).to(dtype)
    return x, w


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    m, k, n, w = size["m"], size["k"], size["n_local"], world_size
    return {
        "link_bytes": (w - 1) * m * k * e,                  # x goes to every peer
        "hbm_bytes": (m * k + k * n + w * m * n) * e,       # read x and w, write the output
        "flops": 2 * w * m * k * n,
    }
