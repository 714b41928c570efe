import torch
import torch.distributed as dist

_GROUPS = {}


def _groups(world: int, ep: int):
    """EP groups are blocks of `ep` consecutive ranks; DP groups are strided by `ep`. Every
    rank creates every group, in the same order, once."""
    if (world, ep) not in _GROUPS:
        rank = dist.get_rank()
        ep_group = dp_group = None
        for d in range(world // ep):
            g = dist.new_group(list(range(d * ep, (d + 1) * ep)))
            if rank // ep == d:
                ep_group = g
        for e in range(ep):
            g = dist.new_group(list(range(e, world, ep)))
            if rank % ep == e:
                dp_group = g
        _GROUPS[(world, ep)] = (ep_group, dp_group)
    return _GROUPS[(world, ep)]


def solution(tokens: torch.Tensor, expert_grad: torch.Tensor, dense_grad: torch.Tensor):
    world = dist.get_world_size()
    dp = 2
    ep = world // dp
    ep_group, dp_group = _groups(world, ep)

    # expert dispatch within the EP group (fixed capacity: chunk j goes to EP peer j)
    recv = torch.empty_like(tokens)
    dist.all_to_all_single(recv, tokens, group=ep_group)

    # expert gradients are replicated across the DP group only
    expert_avg = expert_grad.clone()
    dist.all_reduce(expert_avg, group=dp_group)
    expert_avg.div_(dp)

    # dense (non-expert) gradients are replicated on every rank
    dense_avg = dense_grad.clone()
    dist.all_reduce(dense_avg)
    dense_avg.div_(world)
    return recv, expert_avg, dense_avg
