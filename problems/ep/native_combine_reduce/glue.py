import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): one IPC buffer per rank (flags, two parities of tags and fp32 slots) -------------
def native_setup(lib, ctx):
    ll = ctypes.c_longlong
    max_tokens, max_elems = ll(glue.max_size(ctx, "tokens")), ll(glue.max_size(ctx, "tokens", "hidden"))
    p, i = ctypes.c_void_p, ctypes.c_int
    glue.ipc_setup(lib, ctx, buffer_bytes=[glue.WORLD, max_tokens, max_elems],
                   setup=[glue.RANK, glue.WORLD, glue.BUFS, max_tokens, max_elems],
                   entry=("kb_combine", p, p, p, p, p, i, i, i, p))


def native_call(lib, inputs, ctx):
    expert_out, weights, src_rank, src_token, num_tokens = inputs
    rows, h = expert_out.shape
    out = torch.empty(num_tokens, h, dtype=expert_out.dtype, device=expert_out.device)
    glue.call(lib, ctx, glue.ptr(expert_out), glue.ptr(weights), glue.ptr(src_rank), glue.ptr(src_token),
              glue.ptr(out), rows, num_tokens, h, ctx.stream())
    return out
