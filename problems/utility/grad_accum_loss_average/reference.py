import torch
import torch.distributed as dist


def solution(losses: torch.Tensor, token_counts: torch.Tensor) -> torch.Tensor:
    # [sum of loss * tokens, number of tokens] over this rank's micro-batches, then over ranks
    stats = torch.stack([
        (losses * token_counts).sum(),
        token_counts.sum().to(torch.float32),
    ])
    dist.all_reduce(stats)
    return stats[0] / stats[1]
