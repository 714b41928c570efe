import torch

STEP = 2.0 ** -12      # every gradient value is a multiple of STEP with |value| <= LIM
LIM = 8.0


def inputs(size, rank, world_size, gen, device, dtype):
    # bfloat16 values of every exponent from 2^-12 to 2^3 on a 2^-12 grid: a sum of up to 8 of them
    # is a multiple of 2^-12 below 2^6 (18 bits), exact in float32 in any order, and so is the
    # division by W (a power of two); a bfloat16 (8-bit) partial sum or sum rounds and fails
    g = torch.randn(size["n"], generator=gen, device=device, dtype=torch.float32).mul_(2.0)
    g = g.div_(STEP).round_().clamp_(-LIM / STEP, LIM / STEP).mul_(STEP)
    # bfloat16 keeps the grid: from 2^-5 up its step is >= 2^-12, below it the grid needs <= 7 bits
    return (g.to(dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["n"], world_size
    shards = w // 2
    return {
        # every one of the N values is needed by another rank (shard s' != s by shard s's owners,
        # shard s by the replica partner), so at least N bfloat16 values leave each rank (raw or
        # summed; W = 2 swaps them and reaches it). The reference moves float32.
        "link_bytes": n * e,
        "messages": 1,
        "hbm_bytes": n * e + n // shards * 4,    # read grad, write the float32 shard
        "flops": (w - 1) / w * n,                 # this rank's share of the adds
    }
