import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): one IPC buffer per rank (two flag sets + two staging buffers), mapped everywhere ---
def native_setup(lib, ctx):
    data_bytes = glue.max_size(ctx, "n") * torch.tensor([], dtype=ctx.dtype).element_size()
    glue.check(lib, glue.declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")
    nbytes = glue.declare(lib, "kb_buffer_bytes", ctypes.c_size_t, ctypes.c_longlong)(data_bytes)
    bufs = glue.ipc_buffers(lib, ctx, nbytes)
    setup = glue.declare(lib, "kb_setup", ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong)
    glue.check(lib, setup(ctx.rank, ctx.world, bufs, data_bytes), "kb_setup")
    torch.cuda.synchronize(ctx.device)
    glue.exchange(None)          # every rank mapped every buffer before anyone's first call
    ctx.state["fn"] = glue.declare(lib, "kb_all_reduce", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_longlong, ctypes.c_void_p)


def native_call(lib, inputs, ctx):
    (x,) = inputs
    y = torch.empty_like(x)
    rc = ctx.state["fn"](glue.ptr(x), glue.ptr(y), x.numel() * x.element_size(), ctx.stream())
    glue.check(lib, rc, "kb_all_reduce")
    return y
