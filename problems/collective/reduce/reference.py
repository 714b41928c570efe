import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    out = x.clone()  # dist.reduce may use the buffer as scratch on non-root ranks
    dist.reduce(out, dst=0, op=dist.ReduceOp.SUM)
    if dist.get_rank() == 0:
        return out
    return x.new_empty(0)
