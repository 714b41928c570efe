import torch
import torch.distributed as dist


def solution(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    # this rank's partial sum of the full [m, n] output (its slice of the contraction dim)
    partial = torch.matmul(a, b)
    out = partial.new_empty(partial.shape[0] // world, partial.shape[1])
    dist.reduce_scatter_tensor(out, partial, op=dist.ReduceOp.SUM)
    return out
