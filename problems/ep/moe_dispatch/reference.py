import torch
import torch.distributed as dist


def solution(tokens: torch.Tensor, topk_ids: torch.Tensor, num_experts: int):
    world = dist.get_world_size()
    num_tokens, hidden = tokens.shape
    experts_per_rank = num_experts // world

    # [T, W] mask: does token t go to rank r (at least one of its experts lives there)
    dest_rank = topk_ids // experts_per_rank
    in_rank = torch.zeros(num_tokens, world, dtype=torch.bool, device=tokens.device)
    in_rank.scatter_(1, dest_rank, True)

    # send buffer ordered by destination rank, then by token index
    _, token_idx = in_rank.t().nonzero(as_tuple=True)
    send_buf = tokens.index_select(0, token_idx)
    send_counts = in_rank.sum(dim=0)

    # exchange the counts, then the tokens with uneven splits
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    send_splits = send_counts.tolist()
    recv_splits = recv_counts.tolist()
    recv_tokens = tokens.new_empty(sum(recv_splits), hidden)
    dist.all_to_all_single(recv_tokens, send_buf, recv_splits, send_splits)
    return recv_tokens, recv_counts
