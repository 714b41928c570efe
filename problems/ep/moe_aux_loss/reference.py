import torch
import torch.distributed as dist


def solution(router_probs: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    num_tokens, num_experts = router_probs.shape
    topk = topk_ids.shape[1]

    # local statistics in one buffer: assignments per expert, then probability mass per expert
    stats = torch.cat([
        torch.bincount(topk_ids.flatten(), minlength=num_experts).to(torch.float32),
        router_probs.sum(dim=0),
    ])
    dist.all_reduce(stats)

    total_tokens = num_tokens * world
    fraction = stats[:num_experts] / (total_tokens * topk)
    mean_prob = stats[num_experts:] / total_tokens
    return (fraction * mean_prob).sum() * num_experts
