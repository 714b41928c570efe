import torch


def inputs(size, rank, world_size, gen, device, dtype):
    n, b = size["numel"], size["block"]
    assert n % (b * world_size) == 0
    blocks = n // b
    # gradient-like values whose magnitude varies over three decades from block to block (a
    # fixed pattern, like per-layer gradient scales) with a per-rank factor in [0.5, 2)
    golden = torch.arange(blocks, device=device, dtype=torch.float64).mul_(0.6180339887498949).frac_()
    mag = torch.pow(10.0, golden * 3 - 4).to(dtype)
    mag = mag * torch.pow(2.0, torch.rand(blocks, generator=gen, device=device, dtype=dtype) * 2 - 1)
    g = torch.randn(blocks, b, generator=gen, device=device, dtype=dtype)
    return (g.mul_(mag.unsqueeze(1)).view(-1), b)


def cost(size, world_size, dtype):
    n, b, w = size["numel"], size["block"], world_size
    q_bytes = n + 4 * n // b          # int8 payload + float32 scales
    return {
        # the quantized blocks of this rank reach every peer (the reference all-gathers them)
        "link_bytes": (w - 1) * q_bytes,
        # read the gradient, read the W quantized copies, write the result
        "hbm_bytes": 4 * n + w * q_bytes + 4 * n,
        "flops": 3 * n + 2 * w * n,
    }
