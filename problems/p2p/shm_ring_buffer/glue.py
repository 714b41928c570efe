import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): one segment with W rings, mapped by every rank ------------------------------------
def native_setup(lib, ctx):
    seg_bytes = glue.declare(lib, "kb_segment_bytes", ctypes.c_size_t, ctypes.c_int)(ctx.world)
    ctx.state["segment"] = glue.shared_segment(ctx, seg_bytes)
    p = ctypes.c_void_p
    glue.entry_point(lib, ctx, "kb_ring_exchange", p, p, p, ctypes.c_int64, ctypes.c_int, ctypes.c_int)


def native_call(lib, inputs, ctx):
    (x,) = inputs
    y = torch.empty_like(x)
    glue.call(lib, ctx, ctx.state["segment"], glue.ptr(x), glue.ptr(y), x.numel(), ctx.rank, ctx.world)
    return y
