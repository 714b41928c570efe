import torch


def solution(topk_ids: torch.Tensor, num_experts: int, num_ranks: int):
    num_tokens = topk_ids.shape[0]
    experts_per_rank = num_experts // num_ranks
    valid = topk_ids >= 0

    # -1 slots count in an extra bin / column that is dropped
    num_tokens_per_expert = torch.bincount((topk_ids + 1).flatten(), minlength=num_experts + 1)[1:]
    dest = torch.where(valid, topk_ids // experts_per_rank, num_ranks)
    is_token_in_rank = torch.zeros(num_tokens, num_ranks + 1, dtype=torch.bool, device=topk_ids.device)
    is_token_in_rank.scatter_(1, dest, True)
    is_token_in_rank = is_token_in_rank[:, :num_ranks].contiguous()
    num_tokens_per_rank = is_token_in_rank.sum(dim=0)
    return num_tokens_per_rank.int(), num_tokens_per_expert.int(), is_token_in_rank
