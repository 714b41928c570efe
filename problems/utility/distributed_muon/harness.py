import torch


def shapes(size: dict) -> list[tuple[int, int]]:
    """The full gradient matrices, in argument order: per layer wq, wk, wv, wo [h, h], w_gate,
    w_up [f, h], w_down [h, f]."""
    h, f = size["hidden"], size["ffn"]
    return [s for _ in range(size["layers"]) for s in [(h, h)] * 4 + [(f, h), (f, h), (h, f)]]


def inputs(size, rank, world_size, gen, device, dtype):
    out = []
    for rows, cols in shapes(size):
        assert rows % world_size == 0
        out.append(torch.randn(rows // world_size, cols, generator=gen, device=device, dtype=dtype))
    return tuple(out)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    w = world_size
    link = flops = elems = 0
    for rows, cols in shapes(size):
        s, n = min(rows, cols), max(rows, cols)
        elems += rows * cols
        # any algorithm either brings each matrix's shards together ((W-1) of its W shards
        # leave their rank: spread over the W ranks) or all-reduces the [cols, cols] Gram of
        # the row shards (Gram-space Newton-Schulz): the cheaper of the two, per GPU
        link += min((w - 1) * rows * cols / w ** 2, (w - 1) / w * cols * (cols + 1) / 2)
        # least flops: one symmetric Gram product (s*s*n) and one [s, s] x [s, n] product; the
        # Gram-space iteration does the 5 steps on [s, s] matrices, not counted here
        flops += 3 * s * s * n
    return {
        "link_bytes": link * e,
        "hbm_bytes": 2 * elems / w * e,          # read this rank's shards, write its results
        "flops": flops / w,                      # spread evenly over the ranks at best
    }
