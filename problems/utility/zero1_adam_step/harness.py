import torch


def inputs(size, rank, world_size, gen, device, dtype):
    n = size["numel"]
    assert n % world_size == 0
    shard = n // world_size
    params = torch.randn(n, generator=gen, device=device, dtype=dtype)
    grads = torch.randn(n, generator=gen, device=device, dtype=dtype).mul_(0.01)
    # optimizer state of an ongoing run: m ~ gradient scale, v >= m**2 (as the moving averages
    # of g and g**2 are), so that m / sqrt(v) stays O(1)
    exp_avg = torch.randn(shard, generator=gen, device=device, dtype=dtype).mul_(0.01)
    spread = torch.randn(shard, generator=gen, device=device, dtype=dtype).mul_(0.01)
    exp_avg_sq = exp_avg.square().add_(spread.square_())
    return params, grads, exp_avg, exp_avg_sq, size["step"], 1e-3, 0.9, 0.95, 1e-8, 0.1


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["numel"], world_size
    shard = n // w
    return {
        "link_bytes": (w - 1) * shard * e,             # all-gather of the updated shards
        # read p, g, m, v of the shard, write m, v and the full parameters
        "hbm_bytes": 6 * shard * e + n * e,
        "flops": 14 * shard,
    }
