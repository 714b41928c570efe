import torch


def solution(topk_ids: torch.Tensor, num_experts: int, num_ranks: int):
    num_tokens = topk_ids.shape[0]
    # one row per token, one column per expert (column 0 collects the unused -1 slots): a token's
    # experts are distinct, so every count below is a sum over this mask, and nothing waits on
    # the host (six kernels, no synchronization)
    chosen = torch.zeros(num_tokens, num_experts + 1, dtype=torch.bool, device=topk_ids.device)
    chosen.scatter_(1, topk_ids + 1, True)
    chosen = chosen[:, 1:]
    num_tokens_per_expert = chosen.sum(dim=0, dtype=torch.int32)
    is_token_in_rank = chosen.unflatten(1, (num_ranks, -1)).any(dim=2)
    num_tokens_per_rank = is_token_in_rank.sum(dim=0, dtype=torch.int32)
    return num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank
