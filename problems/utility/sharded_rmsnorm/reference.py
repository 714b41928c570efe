import torch
import torch.distributed as dist

EPS = 1e-6


def solution(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    hidden = x.shape[-1] * world
    h = x.float()
    sum_sq = h.pow(2).sum(dim=-1, keepdim=True)        # this rank's part of the row sum
    dist.all_reduce(sum_sq, op=dist.ReduceOp.SUM)
    rstd = torch.rsqrt(sum_sq / hidden + EPS)
    return (h * rstd * weight.float()).to(x.dtype)
