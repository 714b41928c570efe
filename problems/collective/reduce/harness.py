import torch


def _exact_values(shape, gen, device, dtype):
    # Roughly N(0, 1), but rounded to multiples of 1/8 in [-4, 4]: every partial sum of up to
    # 8 such values is exact in bfloat16, so every reduction order gives identical bits.
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return x.mul_(8).round_().clamp_(-32, 32).div_(8).to(dtype)


def inputs(size, rank, world_size, gen, device, dtype):
    return (_exact_values((size["n"],), gen, device, dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["n"], world_size
    return {
        # rank 0 must take in n elements' worth of partial sums; a reduce-scatter among the
        # others followed by a gather to the root sends about n elements from each of them
        "link_bytes": n * e,
        "hbm_bytes": 2 * n * e,        # read x, write the sum on the root
        "flops": (w - 1) / w * n,
    }
