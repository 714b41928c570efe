import ctypes

import torch

from pytest_kernelbench.rank import glue


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
