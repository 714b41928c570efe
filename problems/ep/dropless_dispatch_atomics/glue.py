import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): one IPC buffer per rank (completion count, row counters, two parities of receive
# areas), mapped everywhere --------------------------------------------------------------------------------
def native_setup(lib, ctx):
    max_tokens = ctypes.c_longlong(glue.max_size(ctx, "tokens"))
    max_elems = ctypes.c_longlong(glue.max_size(ctx, "tokens", "hidden"))
    p, i = ctypes.c_void_p, ctypes.c_int
    glue.ipc_setup(lib, ctx, buffer_bytes=[glue.WORLD, max_tokens, max_elems],
                   setup=[glue.RANK, glue.WORLD, glue.BUFS, max_tokens, max_elems],
                   entry=("kb_dispatch", p, p, p, p, p, i, i, p))


def native_call(lib, inputs, ctx):
    x, in_rank = inputs
    t, h = x.shape
    recv_x = torch.empty(ctx.world * t, h, dtype=x.dtype, device=x.device)
    recv_ids = torch.empty(ctx.world * t, dtype=torch.int32, device=x.device)
    recv_count = torch.empty(1, dtype=torch.int32, device=x.device)
    glue.call(lib, ctx, glue.ptr(x), glue.ptr(in_rank), glue.ptr(recv_x), glue.ptr(recv_ids), glue.ptr(recv_count),
              t, h, ctx.stream())
    return recv_x, recv_ids, recv_count
