import torch
import torch.distributed as dist


def _block_grads(dout, q, k, v, out, lse, scale, causal):
    # flash-attention backward of one block against the GLOBAL out and lse: the block's share of
    # dq, dk, dv (bfloat16), as ring-flash-attention and Megatron context parallelism compute it
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
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    # fp32 dk/dv accumulators of the chunks in kv: they travel the ring with them and come home last
    dkv = torch.zeros((2, *k.shape), dtype=torch.float32, device=k.device)
    dkv_next = torch.empty_like(dkv)
    dkv_works = []
    for step in range(world):
        kv_works = []
        if step < world - 1:               # post the next block's transfer before computing
            kv_works = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, kv, send_to),
                dist.P2POp(dist.irecv, kv_next, recv_from),
            ])

        src = (rank - step) % world        # kv holds the chunks src and 2W-1-src
        if step == 0:                      # own chunks: local order is global order
            dq_b, dk_b, dv_b = _block_grads(dout, q, k, v, out, lse, scale, causal=True)
            dq += dq_b
            rows = slice(None)
        elif src < rank:                   # chunk src precedes both query chunks; 2W-1-src follows both
            dq_b, dk_b, dv_b = _block_grads(dout, q, kv[0, :, :, :half], kv[1, :, :, :half], out, lse, scale, causal=False)
            dq += dq_b
            rows = slice(0, half)
        else:                              # both kv chunks lie between query chunk rank and 2W-1-rank
            dq_b, dk_b, dv_b = _block_grads(dout1, q1, kv[0], kv[1], out1, lse1, scale, causal=False)
            dq[:, :, half:] += dq_b
            rows = slice(None)

        for work in dkv_works:             # the accumulators of the chunks in kv, from the previous rank
            work.wait()
        if step > 0:
            dkv, dkv_next = dkv_next, dkv
        dkv[0, :, :, rows] += dk_b
        dkv[1, :, :, rows] += dv_b
        dkv_works = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, dkv, send_to),
            dist.P2POp(dist.irecv, dkv_next, recv_from),
        ])

        for work in kv_works:
            work.wait()
        kv, kv_next = kv_next, kv
    for work in dkv_works:                 # after W hops our own chunks' accumulators are back
        work.wait()
    return dq.to(q.dtype), dkv_next[0].to(k.dtype), dkv_next[1].to(v.dtype)
