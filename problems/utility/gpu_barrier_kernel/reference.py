import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    """x: float32 [n]. Returns [W, n]: row q is rank q's x (every rank waits for every other)."""
    world = dist.get_world_size()
    out = x.new_empty(world * x.numel())
    dist.all_gather_into_tensor(out, x)
    return out.view(world, x.numel())
