"""Sparse exchange: a token's row goes only to the ranks hosting one of its experts, and only the
nonzero rows of y go back. Ranks first all-gather the routing (ids and weight bits packed in one
int64 tensor, padded) and the nonzero-row masks of y (a byte per global token); from them every
rank derives every split of the two uneven all-to-alls that follow, with no count exchange and
no padding of the token rows."""
import torch
import torch.distributed as dist


def solution(x, topk_ids, topk_weights, y, tokens_per_rank, num_experts):
    world, rank = dist.get_world_size(), dist.get_rank()
    counts = tokens_per_rank.tolist()
    t_max, n, mine = max(counts), sum(counts), x.shape[0]
    lo = sum(counts[:rank])
    hidden, k, dev = x.shape[1], topk_ids.shape[1], x.device
    valid = torch.cat([torch.arange(c, device=dev) + r * t_max for r, c in enumerate(counts)])

    # 1. the routing of every rank (ids and weight bits in one int64 gather) and every rank's
    #    nonzero rows of y
    packed = torch.zeros(t_max, 2 * k, dtype=torch.int64, device=dev)
    packed[:mine, :k] = topk_ids
    packed[:mine, k:] = topk_weights.view(torch.int32).to(torch.int64)
    gathered = torch.empty(world * t_max, 2 * k, dtype=torch.int64, device=dev)
    nz = (y != 0).any(dim=1).to(torch.uint8)
    nz_all = torch.empty(world * n, dtype=torch.uint8, device=dev)
    works = [dist.all_gather_into_tensor(gathered, packed, async_op=True),
             dist.all_gather_into_tensor(nz_all, nz, async_op=True)]
    for work in works:
        work.wait()
    gathered = gathered.index_select(0, valid)
    ids_all = gathered[:, :k].contiguous()
    weights_all = gathered[:, k:].to(torch.int32).view(torch.float32).contiguous()
    nz_all = nz_all.view(world, n).bool()
    bounds = torch.tensor(counts, device=dev).cumsum(0)

    # dispatch: my tokens to each rank hosting one of their experts (destination-major), and the
    # global rows routed here (source-major)
    on = torch.zeros(n, world, dtype=torch.bool, device=dev)
    on.scatter_(1, ids_all // (num_experts // world), True)
    dest, tok = on[lo:lo + mine].t().nonzero(as_tuple=True)
    d_out = torch.bincount(dest, minlength=world).tolist()
    here = on[:, rank].nonzero(as_tuple=True)[0]
    d_in = torch.bucketize(here, bounds, right=True).bincount(minlength=world).tolist()

    # combine: my nonzero rows of y to their owners (owner-major), and the other ranks' nonzero
    # rows of my tokens (source-major)
    send_rows = nz_all[rank].nonzero(as_tuple=True)[0]
    c_out = torch.bucketize(send_rows, bounds, right=True).bincount(minlength=world).tolist()
    src, back_tok = nz_all[:, lo:lo + mine].nonzero(as_tuple=True)
    c_in = torch.bincount(src, minlength=world).tolist()

    recv_x = x.new_empty(len(here), hidden)
    back = y.new_empty(len(back_tok), hidden)
    works = [dist.all_to_all_single(recv_x, x.index_select(0, tok), d_in, d_out, async_op=True),
             dist.all_to_all_single(back, y.index_select(0, send_rows), c_in, c_out, async_op=True)]
    for work in works:
        work.wait()
    x_all = x.new_zeros(n, hidden)
    x_all.index_copy_(0, here, recv_x)
    combined = torch.zeros(mine, hidden, dtype=torch.float32, device=dev)
    combined.index_add_(0, back_tok, back.float())
    return x_all, ids_all, weights_all, combined.to(y.dtype)
