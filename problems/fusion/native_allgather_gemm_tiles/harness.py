import torch


def inputs(size, rank, world_size, gen, device, dtype):
    m, k, n = size["m"], size["k"], size["n"]
    a = torch.randn(m, k, generator=gen, device=device, dtype=dtype)
    # b ~ N(0, 1/k) keeps every output element ~ N(0, 1) whatever k is
    b = (torch.randn(k, n, generator=gen, device=device, dtype=torch.float32) / k ** 0.5).to(dtype)
    return a, b


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    m, k, n, w = size["m"], size["k"], size["n"], world_size
    return {
        "link_bytes": (w - 1) * m * k * e,                      # this rank's rows go to every peer
        # read a and b, the peers' rows land here and are read back, write the output
        "hbm_bytes": (m * k + k * n + 2 * (w - 1) * m * k + w * m * n) * e,
        "flops": 2 * w * m * k * n,
    }
