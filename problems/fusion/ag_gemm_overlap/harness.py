import torch


def inputs(size, rank, world_size, gen, device, dtype):
    m, k, nq, nkv = size["m"], size["k"], size["n_q"], size["n_kv"]
    x = torch.randn(m, k, generator=gen, device=device, dtype=dtype)
    # weights ~ N(0, 1/k) keep every output element ~ N(0, 1) whatever k is
    ws = [(torch.randn(k, n, generator=gen, device=device, dtype=torch.float32) / k ** 0.5).to(dtype)
          for n in (nq, nkv, nkv)]
    return (x, *ws)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    m, k, w = size["m"], size["k"], world_size
    n = size["n_q"] + 2 * size["n_kv"]
    return {
        "link_bytes": (w - 1) * m * k * e,                  # x goes to every peer
        "hbm_bytes": (m * k + k * n + w * m * n) * e,       # read x and the weights, write the outputs
        "flops": 2 * w * m * k * n,
    }
