import torch


def _exact_values(shape, gen, device, dtype):
    # Roughly N(0, 1), but rounded to multiples of 1/8 in [-4, 4]: every partial sum of up to
    # 8 such values is a multiple of 1/8 below 32 in magnitude, hence exact in bfloat16. Any
    # reduction order (ring, tree, one-shot, fp32 accumulation) then gives identical bits, so
    # the default bfloat16 tolerance never fails a correct candidate at W=8 or at 134M elements.
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return x.mul_(8).round_().clamp_(-32, 32).div_(8).to(dtype)


def inputs(size, rank, world_size, gen, device, dtype):
    return (_exact_values((size["n"],), gen, device, dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["n"], world_size
    return {
        "link_bytes": 2 * (w - 1) / w * n * e,   # reduce-scatter + all-gather
        "hbm_bytes": 2 * n * e,                  # read x, write out
        "flops": (w - 1) / w * n,                # this rank's share of the adds
    }
