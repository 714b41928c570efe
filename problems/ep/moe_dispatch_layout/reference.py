import torch
import torch.distributed as dist


def solution(topk_ids: torch.Tensor, num_experts: int):
    rank, world = dist.get_rank(), dist.get_world_size()
    num_tokens = topk_ids.shape[0]
    experts_per_rank = num_experts // world

    # local layout
    num_tokens_per_expert = torch.bincount(topk_ids.flatten(), minlength=num_experts)
    is_token_in_rank = torch.zeros(num_tokens, world, dtype=torch.bool, device=topk_ids.device)
    is_token_in_rank.scatter_(1, topk_ids // experts_per_rank, True)
    num_tokens_per_rank = is_token_in_rank.sum(dim=0)

    # exchange the counts of every rank: [W, W + E]
    local = torch.cat([num_tokens_per_rank, num_tokens_per_expert])
    gathered = local.new_empty(world * local.numel())
    dist.all_gather_into_tensor(gathered, local)
    gathered = gathered.view(world, -1)
    per_rank = gathered[:, :world]            # [source, destination]
    per_expert = gathered[:, world:]          # [source, expert]

    recv_counts = per_rank[:, rank].clone()
    lo = rank * experts_per_rank
    recv_tokens_per_expert = per_expert[:, lo:lo + experts_per_rank].sum(dim=0)

    # slot of each token in each destination's receive buffer: the rows of lower source ranks
    # come first, then this rank's tokens in index order
    base = per_rank[:rank].sum(dim=0)
    slot = is_token_in_rank.long().cumsum(dim=0) - 1 + base
    token_slot = torch.where(is_token_in_rank, slot, torch.full_like(slot, -1))
    return (num_tokens_per_expert, num_tokens_per_rank, is_token_in_rank, token_slot,
            recv_counts, recv_tokens_per_expert)
