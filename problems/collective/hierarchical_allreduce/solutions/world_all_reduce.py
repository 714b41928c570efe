import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    # NCCL picks its own algorithm over both kinds of link (rings/trees across nodes)
    out = x.clone()
    dist.all_reduce(out)
    return out
