import torch
import torch.distributed as dist

EPS = 1e-6


def solution(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
    reduced = x.clone()
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    new_residual = reduced.add_(residual)

    h = new_residual.float()
    rstd = torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + EPS)
    normed = (h * rstd * weight.float()).to(x.dtype)
    return normed, new_residual
