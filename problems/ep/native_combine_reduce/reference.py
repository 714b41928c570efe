import torch
import torch.distributed as dist


def solution(expert_out: torch.Tensor, weights: torch.Tensor, src_rank: torch.Tensor,
             src_token: torch.Tensor, num_tokens: int) -> torch.Tensor:
    world = dist.get_world_size()
    hidden = expert_out.shape[1]

    # rows are grouped by owner rank: exchange the counts, then the rows with their token index
    # and top-k weight
    send_counts = torch.bincount(src_rank, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    send_splits = send_counts.tolist()
    recv_splits = recv_counts.tolist()
    num_recv = sum(recv_splits)
    recv_rows = expert_out.new_empty(num_recv, hidden)
    dist.all_to_all_single(recv_rows, expert_out, recv_splits, send_splits)
    recv_token = src_token.new_empty(num_recv)
    dist.all_to_all_single(recv_token, src_token, recv_splits, send_splits)
    recv_weights = weights.new_empty(num_recv)
    dist.all_to_all_single(recv_weights, weights, recv_splits, send_splits)

    # weighted sum into this rank's tokens, in fp32
    out = torch.zeros(num_tokens, hidden, dtype=torch.float32, device=expert_out.device)
    out.index_add_(0, recv_token, recv_rows.float() * recv_weights.unsqueeze(1))
    return out.to(expert_out.dtype)
