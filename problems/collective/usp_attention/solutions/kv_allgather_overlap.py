"""Sequence-parallel GQA attention by gathering the key/value heads, never the queries.

With 2 key/value heads against 32 query heads, k and v are 1/8 of q's bytes together: every rank
receiving every peer's k and v ((W - 1) x 2 S Hkv D elements) moves far less than Ulysses'
all-to-alls of q and of the output (and their pack/unpack copies), and the attention work per rank
is the same (S queries x W S keys x Hq heads). So:
  1. one asynchronous all-gather of every rank's [k; v] (one message),
  2. meanwhile, flash attention of our queries over our own block (it needs nothing from peers),
  3. then ONE flash call over all the peers' keys (key order is irrelevant without a mask),
  4. the two partial results merged by log-sum-exp in one pass, as a lerp with weight
     sigmoid(lse_own - lse_peers) = exp(lse_own) / (exp(lse_own) + exp(lse_peers)),
     written straight into the [S, Hq, D] bfloat16 output (the unfold and the cast in one copy).
Grouped-query attention folds the query heads of one key/value head into the query length.
"""
import torch
import torch.distributed as dist


def _attention(q, k, v, scale):
    # flash attention of q [1, Hkv, Lq, D] over k, v [1, Hkv, Lk, D]: (out fp32, lse fp32 [..., 1])
    if q.is_cuda:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, scale=scale)[:2]
    else:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, scale=scale)
    return out.float(), lse.unsqueeze(-1)


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    s, hq, d = q.shape
    hkv = k.shape[1]
    rep = hq // hkv
    scale = d ** -0.5

    # [k; v] as [2, Hkv, S, D]: the layout attention reads, so peers' blocks need one copy at most
    kv = torch.stack([k, v]).transpose(1, 2).contiguous()
    gathered = kv.new_empty(world * 2, hkv, s, d)
    work = dist.all_gather_into_tensor(gathered, kv, async_op=True)

    # query head h = g * rep + j of key/value head g becomes row j * S + s of head g
    qf = q.view(s, hkv, rep, d).permute(1, 2, 0, 3).reshape(1, hkv, rep * s, d)
    out, lse = _attention(qf, kv[0].unsqueeze(0), kv[1].unsqueeze(0), scale)

    work.wait()
    if world > 1:
        peers = gathered.view(world, 2, hkv, s, d)
        peers = torch.cat([peers[rank + 1:], peers[:rank]])            # every block but ours
        peers = peers.permute(1, 2, 0, 3, 4).reshape(2, 1, hkv, (world - 1) * s, d)
        out_p, lse_p = _attention(qf, peers[0], peers[1], scale)
        out = torch.lerp(out_p, out, torch.sigmoid(lse - lse_p))

    result = q.new_empty(s, hq, d)
    result.view(s, hkv, rep, d).copy_(out.view(hkv, rep, s, d).permute(2, 0, 1, 3))
    return result
