import torch
import torch.distributed as dist

ULYSSES = 2                                # heads are split over groups of 2 ranks; rings join the groups
_GROUPS = {}


def _ulysses_group(world: int):
    """Ulysses groups are blocks of U consecutive ranks (consecutive sequence blocks). Every rank
    creates every group, in the same order, once."""
    if world not in _GROUPS:
        u, rank = min(ULYSSES, world), dist.get_rank()
        mine = None
        for g in range(world // u):
            group = dist.new_group(list(range(g * u, (g + 1) * u)))
            if rank // u == g:
                mine = group
        _GROUPS[world] = mine
    return _GROUPS[world]


def _block_attention(q, k, v, scale):
    # flash attention on one key/value block; returns (out fp32, logsumexp [..., 1] fp32)
    if q.is_cuda:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, scale=scale)[:2]
    else:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, scale=scale)
    return out.float(), lse.unsqueeze(-1)


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    u = min(ULYSSES, world)
    group = _ulysses_group(world)
    s, hq, d = q.shape
    hkv = k.shape[1]
    hq_l, hkv_l, rep = hq // u, hkv // u, hq // hkv
    scale = d ** -0.5

    # 1) Ulysses: one all-to-all in the group trades our tokens of every head for the group's
    #    tokens (U*S, in sequence order) of our heads: member j gets q heads j*Hq/U.. and the
    #    key/value heads they use
    per = hq_l + 2 * hkv_l
    send = q.new_empty(u, s, per, d)
    send[:, :, :hq_l].copy_(q.view(s, u, hq_l, d).transpose(0, 1))
    send[:, :, hq_l:hq_l + hkv_l].copy_(k.view(s, u, hkv_l, d).transpose(0, 1))
    send[:, :, hq_l + hkv_l:].copy_(v.view(s, u, hkv_l, d).transpose(0, 1))
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    recv = recv.view(u * s, per, d)
    # grouped-query attention: the query heads of one key/value head fold into the query length
    qf = recv[:, :hq_l].reshape(u * s, hkv_l, rep, d).permute(1, 2, 0, 3).reshape(1, hkv_l, rep * u * s, d)
    kv = recv[:, hq_l:].view(u * s, 2, hkv_l, d).permute(1, 2, 0, 3).unsqueeze(1).contiguous()  # [2,1,Hkv_l,U*S,D]

    # 2) ring over the W/U groups: ranks with the same position in their group hold the same
    #    heads; key/value blocks travel while the current one is computed, merged by log-sum-exp
    send_to, recv_from = (rank + u) % world, (rank - u) % world
    kv_next = torch.empty_like(kv)
    out = lse = None
    for step in range(world // u):
        works = []
        if step < world // u - 1:
            works = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, kv, send_to),
                dist.P2POp(dist.irecv, kv_next, recv_from),
            ])
        block_out, block_lse = _block_attention(qf, kv[0], kv[1], scale)
        if out is None:
            out, lse = block_out, block_lse
        else:
            new_lse = torch.logaddexp(lse, block_lse)
            out = out * torch.exp(lse - new_lse) + block_out * torch.exp(block_lse - new_lse)
            lse = new_lse
        for work in works:
            work.wait()
        kv, kv_next = kv_next, kv

    # 3) Ulysses back: our heads of the group's tokens return to the tokens' owners
    out = out.to(q.dtype).view(hkv_l, rep, u, s, d).permute(2, 3, 0, 1, 4).reshape(u, s, hq_l, d).contiguous()
    back = torch.empty_like(out)
    dist.all_to_all_single(back, out, group=group)
    return back.permute(1, 0, 2, 3).reshape(s, hq, d)
