import torch
import torch.distributed as dist
import torch.nn.functional as F


def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    x_full = x.new_empty(world * x.shape[0], x.shape[1])
    dist.all_gather_into_tensor(x_full, x)
    return F.gelu(torch.matmul(x_full, w), approximate="tanh")
