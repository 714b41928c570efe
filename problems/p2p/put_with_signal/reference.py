import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    received = torch.empty_like(x)
    req = dist.isend(x, (rank + 1) % world)
    dist.recv(received, (rank - 1) % world)
    req.wait()
    return x + received
