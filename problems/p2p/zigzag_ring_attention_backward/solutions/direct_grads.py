"""Zig-zag ring attention backward with each block's dk/dv sent straight to its owner.

The reference carries fp32 dk/dv accumulators around the ring behind the key/value chunks: W hops
of the full accumulator pair, each hop waiting for the previous rank's addition (a chain through
every rank). But every block's share is a bfloat16 tensor (the flash backward's output), so:
  - the key/value chunks travel the ring as in the reference (posted before each block's compute);
  - a block's dk, dv (bfloat16, as the flash call returns them) go straight to the chunks' owner,
    only the rows the block touched: the owner's first chunk alone when it precedes both of our
    query chunks, both chunks otherwise (3/4 of a chunk pair on average instead of all of it, in
    half the bytes of fp32, W - 1 messages instead of W hops);
  - the owner adds what it receives into its own fp32 accumulators: the same bfloat16 block
    gradients summed in fp32 as in the reference, in another order, with no chain between ranks.
Each step posts the next key/value transfer before its block's compute (one batch, as the
reference), then one batch that sends the block's gradients to their owner and receives those that
peer rank + s computed against our chunks in the same step; that batch is waited for after the next
block's compute. Every batch is matched within itself on every rank (NCCL runs one as one group).
"""
import torch
import torch.distributed as dist

_KV, _GRAD = 0, 1                          # message tags (gloo matches by tag; NCCL keeps order per peer)


def _block_grads(dout, q, k, v, out, lse, scale, causal):
    # flash-attention backward of one block against the GLOBAL out and lse (bfloat16 dq, dk, dv)
    if q.is_cuda:
        return torch.ops.aten._scaled_dot_product_flash_attention_backward(
            dout, q, k, v, out, lse, None, None, q.shape[2], k.shape[2], 0.0, causal, None, None, scale=scale)
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        dout, q, k, v, out, lse, 0.0, causal, scale=scale)


def solution(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, dout: torch.Tensor,
             lse: torch.Tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    scale = q.shape[-1] ** -0.5
    half = q.shape[2] // 2                 # local rows [0, half) = chunk rank, [half, 2 half) = chunk 2W-1-rank
    send_to, recv_from = (rank + 1) % world, (rank - 1) % world
    q1, out1, dout1, lse1 = q[:, :, half:], out[:, :, half:], dout[:, :, half:], lse[:, :, half:].contiguous()

    kv = torch.stack([k, v])               # [2, B, H, 2C, D]: the key/value chunks travel as one message
    kv_next = torch.empty_like(kv)
    kv_works = []
    if world > 1:
        kv_works = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, send_to, tag=_KV),
                                           dist.P2POp(dist.irecv, kv_next, recv_from, tag=_KV)])
    # our own causal block: our fp32 dk/dv accumulators start from it
    dq_b, dk_b, dv_b = _block_grads(dout, q, k, v, out, lse, scale, causal=True)
    dq = dq_b.float()
    dkv = torch.stack([dk_b, dv_b]).float()

    grad_works, incoming = [], None
    for step in range(1, world):
        for work in kv_works:
            work.wait()
        kv, kv_next = kv_next, kv
        kv_works = []
        if step < world - 1:               # post the next block's transfer before computing
            kv_works = dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, send_to, tag=_KV),
                                               dist.P2POp(dist.irecv, kv_next, recv_from, tag=_KV)])

        src = (rank - step) % world        # kv holds the chunks src and 2W-1-src
        if src < rank:                     # chunk src precedes both query chunks; 2W-1-src follows both
            dq_b, dk_b, dv_b = _block_grads(dout, q, kv[0, :, :, :half], kv[1, :, :, :half], out, lse, scale,
                                            causal=False)
            dq += dq_b
        else:                              # both kv chunks lie between query chunk rank and 2W-1-rank
            dq_b, dk_b, dv_b = _block_grads(dout1, q1, kv[0], kv[1], out1, lse1, scale, causal=False)
            dq[:, :, half:] += dq_b

        if incoming is not None:           # the previous step's gradients of our chunks
            _add(dkv, grad_works, *incoming)
        # ours to src's owner; from peer rank + step, which held our chunks this step: its share covers
        # our first chunk only when that chunk precedes both of its query chunks (rank < peer). One
        # batch per step on every rank, matched within it (NCCL runs a batch as one group)
        peer = (rank + step) % world
        rows = slice(0, half) if rank < peer else slice(0, 2 * half)
        sent = (dk_b.contiguous(), dv_b.contiguous())   # referenced until its batch is waited
        incoming = (rows, torch.empty_like(k[:, :, rows]), torch.empty_like(v[:, :, rows]))
        grad_works = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, sent[0], src, tag=_GRAD), dist.P2POp(dist.isend, sent[1], src, tag=_GRAD),
            dist.P2POp(dist.irecv, incoming[1], peer, tag=_GRAD), dist.P2POp(dist.irecv, incoming[2], peer, tag=_GRAD),
        ])
    if incoming is not None:
        _add(dkv, grad_works, *incoming)
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


def _add(dkv, works, rows, dk, dv):
    for work in works:                     # the whole batch: NCCL gives one work for it
        work.wait()
    dkv[0, :, :, rows] += dk
    dkv[1, :, :, rows] += dv
