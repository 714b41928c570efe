import torch
import torch.distributed as dist


def solution(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    a_full = a.new_empty(world * a.shape[0], a.shape[1])
    dist.all_gather_into_tensor(a_full, a)
    return torch.matmul(a_full, b)
