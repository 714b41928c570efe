import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.new_empty(x.numel() // dist.get_world_size())
    dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.SUM)
    return out
