import torch
import torch.distributed as dist
import torch.nn.functional as F

EPS = 1e-6


def solution(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor):
    partial = F.linear(x, weight)                      # [T, H], fp32 accumulation in cuBLAS
    dist.all_reduce(partial, op=dist.ReduceOp.SUM)
    new_residual = partial.add_(residual)

    h = new_residual.float()
    rstd = torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + EPS)
    normed = (h * rstd * norm_weight.float()).to(x.dtype)
    return normed, new_residual
