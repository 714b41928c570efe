import torch
import torch.distributed as dist


def solution(x: torch.Tensor, topk_ids: torch.Tensor, num_experts: int):
    rank, world = dist.get_rank(), dist.get_world_size()
    num_tokens, hidden = x.shape
    topk = topk_ids.shape[1]
    local_experts = num_experts // world
    capacity = world * num_tokens
    device = x.device

    # one copy per (token, expert) pair, ordered by global expert (so by destination rank)
    flat = topk_ids.flatten()
    order = torch.argsort(flat, stable=True)
    token = order // topk
    send_x = x.index_select(0, token)
    send_src = (token + rank * num_tokens).to(torch.int32)
    per_expert = torch.bincount(flat, minlength=num_experts)

    recv_per_expert = torch.empty_like(per_expert)           # [source, local expert]
    dist.all_to_all_single(recv_per_expert, per_expert)
    send_splits = per_expert.view(world, local_experts).sum(dim=1).tolist()
    recv_splits = recv_per_expert.view(world, local_experts).sum(dim=1).tolist()
    num_recv = sum(recv_splits)
    recv_x = x.new_empty(num_recv, hidden)
    dist.all_to_all_single(recv_x, send_x, recv_splits, send_splits)
    recv_src = send_src.new_empty(num_recv)
    dist.all_to_all_single(recv_src, send_src, recv_splits, send_splits)

    # pack per local expert: rows arrive source-major, then expert, then token
    counts = recv_per_expert.view(world, local_experts)
    row_expert = torch.repeat_interleave(torch.arange(local_experts, device=device).repeat(world),
                                         counts.flatten())
    perm = torch.argsort(row_expert, stable=True)
    recv_count = counts.sum(dim=0)
    start = torch.cumsum(recv_count, dim=0) - recv_count
    expert_sorted = row_expert.index_select(0, perm)
    slot = expert_sorted * capacity + torch.arange(num_recv, device=device) - start.index_select(0, expert_sorted)

    out_x = x.new_empty(local_experts * capacity, hidden)
    out_x.index_copy_(0, slot, recv_x.index_select(0, perm))
    out_src = torch.full((local_experts * capacity,), -1, dtype=torch.int32, device=device)
    out_src.index_copy_(0, slot, recv_src.index_select(0, perm))
    return (out_x.view(local_experts, capacity, hidden), out_src.view(local_experts, capacity),
            recv_count.to(torch.int32))
