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
    # the cheaper of the two legal ways to move the data: all-gather the quantized blocks (W-1
    # copies of q_bytes leave), or all-to-all the quantized chunks to their owners, who sum them
    # in float32 and all-gather the sums ((W-1)/W of q_bytes, then of the 4n bytes of float32)
    gather, owners = (w - 1) * q_bytes, (w - 1) / w * (q_bytes + 4 * n)
    return {
        "link_bytes": min(gather, owners),
        "hbm_bytes": 4 * n + 4 * n,                    # read the gradient, write the result, at least
        # quantize (abs, max, divide) every element; dequantize and add the W contributions of
        # this rank's 1/W of the elements at least (the owners' way)
        "flops": 3 * n + 2 * n,
    }
