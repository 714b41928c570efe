import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone() if dist.get_rank() == 0 else torch.empty_like(x)
    dist.broadcast(out, src=0)
    return out
