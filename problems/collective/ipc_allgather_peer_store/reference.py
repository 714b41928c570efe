import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.new_empty(dist.get_world_size() * x.numel())
    dist.all_gather_into_tensor(out, x)
    return out
