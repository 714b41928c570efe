import torch


def inputs(size, rank, world_size, gen, device, dtype):
    b, c, n, k = size["batch"], size["channels"], size["len_local"], size["kernel"]
    assert k % 2 == 1 and n >= k
    x = torch.randn(b, c, n, generator=gen, device=device, dtype=dtype)
    # uniform taps with variance 1/K keep every output element ~ N(0, 1)
    w = ((torch.rand(c, 1, k, generator=gen, device=device, dtype=torch.float32) * 2 - 1) * (3 / k) ** 0.5).to(dtype)
    return x, w


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    b, c, n, k = size["batch"], size["channels"], size["len_local"], size["kernel"]
    pad = (k - 1) // 2
    sides = 1 if world_size == 2 else 2        # an inner rank feeds both neighbours
    return {
        "link_bytes": sides * b * c * pad * e,
        "hbm_bytes": (2 * b * c * n + c * k) * e,   # read x and w, write out
        "flops": 2 * b * c * n * k,
    }
