import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    # the row-parallel layer's output, reduced where it lies (Megatron's _reduce)
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x
