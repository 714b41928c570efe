import torch


def _shapes(size):
    h, f = size["hidden"], size["ffn"]
    per_layer = [
        (3 * h, h),     # attention qkv weight shard
        (h, h),         # attention output weight shard
        (2 * f, h),     # gated MLP up/gate weight shard
        (h, f),         # MLP down weight shard
        (h,),           # input norm gain
        (h,),           # post-attention norm gain
    ]
    return per_layer * size["layers"]


def inputs(size, rank, world_size, gen, device, dtype):
    shapes = _shapes(size)
    numel = sum(torch.Size(s).numel() for s in shapes)
    # O(1) gradients (so that the float32 tolerance really tests the scaled values) with a
    # per-rank scale u_r ~ U(0.2, 1.6); max_norm is set so that
    # total_norm / max_norm ~ 1.4 * sqrt(mean_r u_r^2): clipping happens in about 75% (W=2)
    # to 95% (W=8) of draws, and the unclipped branch is exercised too.
    u = torch.rand((), generator=gen, device=device, dtype=torch.float32) * 1.4 + 0.2
    grads = [torch.randn(s, generator=gen, device=device, dtype=dtype).mul_(u) for s in shapes]
    max_norm = (world_size * numel) ** 0.5 / 1.4
    return (max_norm, *grads)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n = sum(torch.Size(s).numel() for s in _shapes(size))
    return {
        "link_bytes": 2 * (world_size - 1) / world_size * e,   # all-reduce of one scalar
        "hbm_bytes": 3 * n * e,          # read for the norm, read + write to scale
        "flops": 4 * n,                  # square-accumulate, then scale
    }
