import torch


def _placements(num_experts, world_size):
    """The two placements must be identical on every rank, while inputs() draws per-rank values
    from `gen`: they come from a generator with a constant seed (per E and W) instead. This is
    part of the problem instance: the balancer's decision is fixed, the weights are fresh."""
    g = torch.Generator().manual_seed(20250611 + 1009 * num_experts + world_size)
    old = torch.randperm(num_experts, generator=g)
    # about half of the slots get a new expert: a random half of the slots is shuffled among
    # itself (most of those experts change rank, the rest stay where they are)
    moved = torch.randperm(num_experts, generator=g)[: num_experts // 2]
    shuffled = moved[torch.randperm(moved.numel(), generator=g)]
    new = old.clone()
    new[moved] = old[shuffled]
    return old, new


def inputs(size, rank, world_size, gen, device, dtype):
    e, p = size["experts"], size["expert_numel"]
    assert e % world_size == 0
    old, new = _placements(e, world_size)
    weights = torch.randn(e // world_size, p, generator=gen, device=device, dtype=dtype)
    return weights, old.to(device), new.to(device)


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    e, p, w = size["experts"], size["expert_numel"], world_size
    old, new = _placements(e, w)
    per = e // w
    slot_of = torch.empty_like(old)
    slot_of[old] = torch.arange(e)
    src_rank = slot_of[new] // per
    dst_rank = torch.arange(e) // per
    leaving = torch.bincount(src_rank[src_rank != dst_rank], minlength=w)
    return {
        "link_bytes": int(leaving.max()) * p * el,   # the busiest sender
        "hbm_bytes": 2 * per * p * el,               # read and write every local slot once
        "flops": 0,
    }
