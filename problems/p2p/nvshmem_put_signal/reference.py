import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)   # equal splits of n / W elements
    return out
