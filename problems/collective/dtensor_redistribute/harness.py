import torch


def _chunk(n, k):
    q = -(-n // k)
    return [max(0, min(q, n - i * q)) for i in range(k)]


def _layout(size, rank, world_size):
    """(rows of this rank's input block, columns of its output block) on the 2 x (W/2) mesh."""
    half = world_size // 2
    i, j = rank // half, rank % half
    return _chunk(_chunk(size["rows"], 2)[i], half)[j], _chunk(size["cols"], half)[j]


def inputs(size, rank, world_size, gen, device, dtype):
    assert world_size % 2 == 0
    r, _ = _layout(size, rank, world_size)
    x = torch.randn(r, size["cols"], generator=gen, device=device, dtype=dtype)
    return x, size["rows"], size["cols"]


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    w, rows, cols = world_size, size["rows"], size["cols"]
    link = hbm = 0
    for rank in range(w):
        r, c = _layout(size, rank, w)
        # every rank must receive its output less the rows it holds (what a rank sends could be
        # relayed and so spread: the received bytes are the bound)
        link = max(link, (rows - r) * c)
        hbm = max(hbm, r * cols + rows * c)       # read its block, write its output
    return {"link_bytes": link * e, "hbm_bytes": hbm * e}
