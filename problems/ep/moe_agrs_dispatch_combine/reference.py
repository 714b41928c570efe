import torch
import torch.distributed as dist


def solution(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, y: torch.Tensor,
             tokens_per_rank: torch.Tensor, num_experts: int):
    world = dist.get_world_size()
    counts = tokens_per_rank.tolist()
    t_max = max(counts)
    hidden = x.shape[1]

    # rows of the padded [W * t_max] layout that hold real tokens (rank-major, as in y)
    valid = torch.cat([torch.arange(c, device=x.device) + r * t_max for r, c in enumerate(counts)])

    # dispatch: pad every rank's tokens and routing to t_max rows and all-gather them
    works, gathered = [], []
    for t in (x, topk_ids, topk_weights):
        pad = t.new_zeros(t_max, *t.shape[1:])
        pad[: t.shape[0]] = t
        out = t.new_empty(world * t_max, *t.shape[1:])
        works.append(dist.all_gather_into_tensor(out, pad, async_op=True))
        gathered.append(out)

    # combine: reduce-scatter this rank's partial outputs, padded the same way
    y_pad = y.new_zeros(world * t_max, hidden)
    y_pad.index_copy_(0, valid, y)
    combined = y.new_empty(t_max, hidden)
    works.append(dist.reduce_scatter_tensor(combined, y_pad, async_op=True))

    for work in works:
        work.wait()
    x_all, ids_all, weights_all = (g.index_select(0, valid) for g in gathered)
    return x_all, ids_all, weights_all, combined[: x.shape[0]].clone()
