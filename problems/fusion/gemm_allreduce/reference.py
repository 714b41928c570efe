import torch
import torch.distributed as dist


def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # this rank's partial sum of the full output (its slice of the contraction dim)
    out = torch.matmul(x, w)
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
