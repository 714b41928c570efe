import torch
import torch.distributed as dist

EPS = 1e-6


def solution(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    reduced = x.new_empty(x.shape[0] // world, x.shape[1])
    dist.reduce_scatter_tensor(reduced, x, op=dist.ReduceOp.SUM)

    h = reduced.float()
    rstd = torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return (h * rstd * weight.float()).to(x.dtype)
