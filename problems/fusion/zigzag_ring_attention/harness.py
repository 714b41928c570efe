import torch


def inputs(size, rank, world_size, gen, device, dtype):
    b, h, c, d = size["batch"], size["heads"], size["chunk"], size["head_dim"]
    q = torch.randn(b, h, 2 * c, d, generator=gen, device=device, dtype=dtype)
    k = torch.randn(b, h, 2 * c, d, generator=gen, device=device, dtype=dtype)
    # v gets a per-rank, per-head, per-channel offset in [-2, 2]: the output is then close to an
    # average of the offsets of the ranks whose chunks a query sees, so a candidate that skips,
    # double-counts or wrongly masks a block is off by O(0.1..1), far above the tolerance.
    offset = torch.rand(1, h, 1, d, generator=gen, device=device, dtype=torch.float32) * 4 - 2
    v = (torch.randn(b, h, 2 * c, d, generator=gen, device=device, dtype=torch.float32) + offset).to(dtype)
    return q, k, v


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    b, h, c, d, w = size["batch"], size["heads"], size["chunk"], size["head_dim"], world_size
    block = b * h * 2 * c * d              # one local tensor
    # causal pairs for this rank's two query chunks: C * (r*C + C/2) + C * ((2W-1-r)*C + C/2) = 2W*C^2
    pairs = 2 * w * c * c
    return {
        "link_bytes": (w - 1) * 2 * block * e,   # this rank's k and v reach every peer
        "hbm_bytes": 4 * block * e,              # read q, k, v, write out
        "flops": 4 * b * h * pairs * d,          # QK^T and PV over the unmasked pairs
    }
