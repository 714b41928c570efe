import torch
import torch.distributed as dist


def solution(num_tokens_per_rank: torch.Tensor, num_tokens_per_expert: torch.Tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    local = num_tokens_per_expert.numel() // world

    # every rank's counts: [W, W + E]
    mine = torch.cat([num_tokens_per_rank, num_tokens_per_expert])
    gathered = mine.new_empty(world * mine.numel())
    dist.all_gather_into_tensor(gathered, mine)
    gathered = gathered.view(world, -1)
    per_rank = gathered[:, :world]                                       # [source, destination]
    recv_counts = gathered[:, world + rank * local:world + (rank + 1) * local].contiguous()   # [source, local expert]

    rank_prefix = per_rank.cumsum(dim=0, dtype=torch.int32)
    recv_tokens_per_expert = recv_counts.sum(dim=0, dtype=torch.int32)
    # expert-major receive buffer: local expert j's block starts after experts < j; inside it,
    # the sources in rank order
    expert_start = recv_tokens_per_expert.cumsum(dim=0, dtype=torch.int32) - recv_tokens_per_expert
    recv_offsets = expert_start + recv_counts.cumsum(dim=0, dtype=torch.int32) - recv_counts
    return rank_prefix, recv_counts, recv_offsets, recv_tokens_per_expert
