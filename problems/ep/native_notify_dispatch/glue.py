import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): one IPC buffer per rank (flags + two parities of message slots), mapped everywhere ---
def native_setup(lib, ctx):
    p = ctypes.c_void_p
    glue.ipc_setup(lib, ctx, buffer_bytes=[],
                   setup=[glue.RANK, glue.WORLD, glue.BUFS],
                   entry=("kb_notify_dispatch", p, p, p, p, p, p, ctypes.c_int, p))


def native_call(lib, inputs, ctx):
    per_rank, per_expert = inputs
    w, e = ctx.world, per_expert.numel()
    local = e // w
    new = dict(dtype=torch.int32, device=per_expert.device)
    rank_prefix = torch.empty(w, w, **new)
    recv_counts = torch.empty(w, local, **new)
    recv_offsets = torch.empty(w, local, **new)
    recv_per_expert = torch.empty(local, **new)
    glue.call(lib, ctx, glue.ptr(per_rank), glue.ptr(per_expert), glue.ptr(rank_prefix), glue.ptr(recv_counts),
              glue.ptr(recv_offsets), glue.ptr(recv_per_expert), e, ctx.stream())
    return rank_prefix, recv_counts, recv_offsets, recv_per_expert
