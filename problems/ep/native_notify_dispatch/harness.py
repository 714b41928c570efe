import ctypes

import torch

from pytest_kernelbench.native import glue


def inputs(size, rank, world_size, gen, device, dtype):
    t, e, k = size["tokens"], size["experts"], size["topk"]
    assert e % world_size == 0 and k <= e
    # the counts of a real routing: K distinct experts per token, uneven loads (a per-rank preference)
    bias = torch.rand(e, generator=gen, device=device)
    topk_ids = (torch.rand(t, e, generator=gen, device=device) + bias).topk(k, dim=1).indices
    per_expert = torch.zeros(e, dtype=torch.int32, device=device)
    per_expert.index_add_(0, topk_ids.flatten(), torch.ones(t * k, dtype=torch.int32, device=device))
    in_rank = torch.zeros(t, world_size, dtype=torch.int32, device=device)
    in_rank.scatter_(1, topk_ids // (e // world_size), 1)
    per_rank = in_rank.sum(dim=0, dtype=torch.int32)
    return per_rank, per_expert


def cost(size, world_size, dtype):
    e, w = size["experts"], world_size
    local = e // w
    return {
        "link_bytes": (w - 1) * (w + local) * 4,                # this rank's message to every peer
        "hbm_bytes": (w + e) * 4 + (w * w + 2 * w * local + local) * 4 + w * (w + local) * 4,
        "flops": w * w + 2 * w * local,
    }


# ---- glue (hidden): one IPC buffer per rank (flags + two parities of message slots), mapped everywhere ---
def native_setup(lib, ctx):
    glue.check(lib, glue.declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")
    nbytes = glue.declare(lib, "kb_buffer_bytes", ctypes.c_size_t)()
    bufs = glue.ipc_buffers(lib, ctx, nbytes)
    setup = glue.declare(lib, "kb_setup", ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
    glue.check(lib, setup(ctx.rank, ctx.world, bufs), "kb_setup")
    torch.cuda.synchronize(ctx.device)
    glue.exchange(None)          # every rank mapped every buffer before anyone's first call
    p = ctypes.c_void_p
    ctx.state["fn"] = glue.declare(lib, "kb_notify_dispatch", ctypes.c_int, p, p, p, p, p, p, ctypes.c_int, p)


def native_call(lib, inputs, ctx):
    per_rank, per_expert = inputs
    w, e = ctx.world, per_expert.numel()
    local = e // w
    new = dict(dtype=torch.int32, device=per_expert.device)
    rank_prefix = torch.empty(w, w, **new)
    recv_counts = torch.empty(w, local, **new)
    recv_offsets = torch.empty(w, local, **new)
    recv_per_expert = torch.empty(local, **new)
    rc = ctx.state["fn"](glue.ptr(per_rank), glue.ptr(per_expert), glue.ptr(rank_prefix), glue.ptr(recv_counts),
                         glue.ptr(recv_offsets), glue.ptr(recv_per_expert), e, ctx.stream())
    glue.check(lib, rc, "kb_notify_dispatch")
    return rank_prefix, recv_counts, recv_offsets, recv_per_expert
