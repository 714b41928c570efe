import torch
import torch.distributed as dist


def solution(x: torch.Tensor, is_token_in_rank: torch.Tensor, token_slot: torch.Tensor,
             num_tokens_per_rank: torch.Tensor):
    world = dist.get_world_size()
    num_tokens, hidden = x.shape

    # exchange the counts
    recv_counts = torch.empty_like(num_tokens_per_rank)
    dist.all_to_all_single(recv_counts, num_tokens_per_rank)
    send_splits = num_tokens_per_rank.tolist()
    recv_splits = recv_counts.tolist()

    # tokens grouped by destination rank, in token order (their token_slot order)
    _, token_idx = is_token_in_rank.t().nonzero(as_tuple=True)
    # one uneven all_to_all_single (gloo's list all_to_all needs equal sizes), then
    # rank s's tokens land in rows 0 .. recv_counts[s] - 1 of block s
    packed = x.new_empty(sum(recv_splits), hidden)
    dist.all_to_all_single(packed, x.index_select(0, token_idx), recv_splits, send_splits)
    recv_x = x.new_empty(world, num_tokens, hidden)
    for s, chunk in enumerate(packed.split(recv_splits)):
        recv_x[s, :chunk.shape[0]] = chunk
    return recv_x, recv_counts
