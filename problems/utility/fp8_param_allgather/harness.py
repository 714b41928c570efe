import torch


def inputs(size, rank, world_size, gen, device, dtype):
    n, b = size["numel"], size["block"]
    assert n % (b * world_size) == 0
    shard_n = n // world_size
    # fp8 payload spread over the e4m3 range (normals and subnormals), as after absmax scaling
    q = torch.randn(shard_n, generator=gen, device=device, dtype=torch.float32).mul_(96).clamp_(-448, 448)
    shard = q.to(torch.float8_e4m3fn)
    # power-of-two (UE8M0) block scales 2**k, k in [-17, -8]: weights of magnitude ~1e-3..1e-1
    k = torch.randint(-17, -7, (shard_n // b,), generator=gen, device=device, dtype=torch.int32)
    scales = ((k + 127) << 23).view(torch.float32)
    return shard, scales, b


def cost(size, world_size, dtype):
    n, b, w = size["numel"], size["block"], world_size
    shard_bytes = n // w * (1 + 4 / b)
    return {
        "link_bytes": (w - 1) * shard_bytes,            # this rank's shard reaches every peer
        "hbm_bytes": w * shard_bytes + 2 * n,           # read every shard once, write bf16 params
        "flops": n,
    }
