import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    y = torch.empty_like(x)
    req = dist.isend(x, (rank + 1) % world)
    dist.recv(y, (rank - 1) % world)
    req.wait()
    return y
