import torch


def inputs(size, rank, world_size, gen, device, dtype):
    t, h = size["tokens"], size["hidden"]
    assert h % world_size == 0
    hl = h // world_size
    # a scale in [0.25, 4] per rank and row on x: a rank's slice weighs differently in each row's
    # mean square, so a norm taken over the local slice only is far off; and in some rows every
    # rank's slice dominates, so a norm that skips one rank is far off there (one scale per rank
    # let a rank drawn near 0.25 weigh ~1 % of the rows' mean square at W = 8: skipping it moved
    # the output by less than rtol; bench/oracle_audit.py)
    scale = 4.0 ** (2 * torch.rand(t, 1, generator=gen, device=device) - 1)
    x = (torch.randn(t, hl, generator=gen, device=device, dtype=torch.float32) * scale).to(dtype)
    weight = (1 + 0.25 * torch.randn(hl, generator=gen, device=device, dtype=torch.float32)).to(dtype)
    return x, weight


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    t, h, w = size["tokens"], size["hidden"], world_size
    n = t * (h // w)
    return {
        "link_bytes": 2 * (w - 1) / w * t * 4,         # all-reduce of the [T] fp32 sums of squares
        "hbm_bytes": 2 * n * e + h // w * e,           # read x and weight, write the output
        "flops": 4 * n,                                # square-accumulate, scale twice
    }
