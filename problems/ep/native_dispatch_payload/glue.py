import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): one IPC buffer per rank (flags, counts, two parities of receive blocks) -----------
def native_setup(lib, ctx):
    max_elems = ctypes.c_longlong(glue.max_size(ctx, "tokens", "hidden"))
    p, i = ctypes.c_void_p, ctypes.c_int
    glue.ipc_setup(lib, ctx, buffer_bytes=[glue.WORLD, max_elems],
                   setup=[glue.RANK, glue.WORLD, glue.BUFS, max_elems],
                   entry=("kb_dispatch", p, p, p, p, p, p, i, i, p))


def native_call(lib, inputs, ctx):
    x, in_rank, token_slot, per_rank = inputs
    t, h = x.shape
    recv_x = torch.empty(ctx.world, t, h, dtype=x.dtype, device=x.device)
    recv_counts = torch.empty(ctx.world, dtype=torch.int32, device=x.device)
    glue.call(lib, ctx, glue.ptr(x), glue.ptr(in_rank), glue.ptr(token_slot), glue.ptr(per_rank),
              glue.ptr(recv_x), glue.ptr(recv_counts), t, h, ctx.stream())
    return recv_x, recv_counts
