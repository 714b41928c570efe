import torch


def inputs(size, rank, world_size, gen, device, dtype):
    b, h, s, d = size["batch"], size["heads"], size["seq_local"], size["head_dim"]
    q = torch.randn(b, h, s, d, generator=gen, device=device, dtype=dtype)
    k = torch.randn(b, h, s, d, generator=gen, device=device, dtype=dtype)
    # v gets a per-rank, per-head, per-channel offset in [-2, 2]: with near-uniform attention
    # the output is then close to the average offset over all ranks, so a candidate that
    # skips or double-counts a rank's block is off by O(0.1..1), far above the tolerance.
    offset = torch.rand(1, h, 1, d, generator=gen, device=device, dtype=torch.float32) * 4 - 2
    v = (torch.randn(b, h, s, d, generator=gen, device=device, dtype=torch.float32) + offset).to(dtype)
    return q, k, v


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    b, h, s, d, w = size["batch"], size["heads"], size["seq_local"], size["head_dim"], world_size
    block = b * h * s * d
    return {
        "link_bytes": (w - 1) * 2 * block * e,   # this rank's k and v reach every peer
        "hbm_bytes": 4 * block * e,              # read q, k, v, write out
        "flops": 4 * b * h * s * (w * s) * d,    # QK^T and PV over the full sequence
    }
