import torch
import torch.distributed as dist
import torch.nn.functional as F


def solution(x: torch.Tensor, router_logits: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor,
             topk: int) -> torch.Tensor:
    world = dist.get_world_size()
    num_tokens, hidden = x.shape
    num_experts = router_logits.shape[1]
    local_experts = w1.shape[0]
    device = x.device

    # route: top-k experts, weights = softmax over the chosen logits (float32)
    top_logits, top_ids = router_logits.topk(topk, dim=1)
    top_weights = torch.softmax(top_logits, dim=1)

    # permute the (token, k) pairs by expert; experts are contiguous per rank, so this also
    # groups them by destination rank
    flat_ids = top_ids.flatten()
    order = torch.argsort(flat_ids, stable=True)
    pair_token = order // topk
    send_x = x.index_select(0, pair_token)
    tokens_per_expert = torch.bincount(flat_ids, minlength=num_experts)

    # dispatch: counts per (source, local expert), then the rows
    recv_per_expert = torch.empty_like(tokens_per_expert)
    dist.all_to_all_single(recv_per_expert, tokens_per_expert)
    send_splits = tokens_per_expert.view(world, local_experts).sum(dim=1).tolist()
    recv_splits = recv_per_expert.view(world, local_experts).sum(dim=1).tolist()
    recv_x = x.new_empty(sum(recv_splits), hidden)
    dist.all_to_all_single(recv_x, send_x, recv_splits, send_splits)

    # rows arrive source-major then expert; regroup them expert-major for the expert MLPs
    row_expert = torch.repeat_interleave(
        torch.arange(local_experts, device=device).repeat(world), recv_per_expert)
    perm = torch.argsort(row_expert, stable=True)
    grouped = recv_x.index_select(0, perm)
    # every local expert's MLP in two grouped GEMMs (rows [offs[j-1], offs[j]) are expert j's)
    offs = torch.cumsum(recv_per_expert.view(world, local_experts).sum(dim=0), dim=0, dtype=torch.int32)
    h = F.silu(torch._grouped_mm(grouped, w1, offs=offs))
    y = torch.empty_like(grouped)
    y.index_copy_(0, perm, torch._grouped_mm(h, w2, offs=offs))

    # combine: rows go back to their source, weighted sum in float32
    back = x.new_empty(send_x.shape)
    dist.all_to_all_single(back, y, send_splits, recv_splits)
    pair_weight = top_weights.flatten().index_select(0, order)
    out = torch.zeros(num_tokens, hidden, dtype=torch.float32, device=device)
    out.index_add_(0, pair_token, back.float() * pair_weight.unsqueeze(1))
    return out.to(x.dtype)
