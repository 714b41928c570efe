import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): one IPC buffer per rank (flags + two staging buffers), mapped everywhere ---------
def _max_bytes(ctx):
    return max(int(c["tokens"]) * int(c["hidden"]) for c in ctx.sizes.values()) * 2


def native_setup(lib, ctx):
    data_bytes = _max_bytes(ctx)
    glue.check(lib, glue.declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")
    nbytes = glue.declare(lib, "kb_buffer_bytes", ctypes.c_size_t, ctypes.c_longlong)(data_bytes)
    bufs = glue.ipc_buffers(lib, ctx, nbytes)
    setup = glue.declare(lib, "kb_setup", ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong)
    glue.check(lib, setup(ctx.rank, ctx.world, bufs, data_bytes), "kb_setup")
    torch.cuda.synchronize(ctx.device)
    glue.exchange(None)          # every rank mapped every buffer before anyone's first call
    p = ctypes.c_void_p
    ctx.state["fn"] = glue.declare(lib, "kb_allreduce_rmsnorm", ctypes.c_int, p, p, p, p, p,
                                   ctypes.c_int, ctypes.c_int, p)


def native_call(lib, inputs, ctx):
    x, residual, weight = inputs
    normed = torch.empty_like(x)
    new_residual = torch.empty_like(x)
    rc = ctx.state["fn"](glue.ptr(x), glue.ptr(residual), glue.ptr(weight), glue.ptr(normed), glue.ptr(new_residual),
                         x.shape[0], x.shape[1], ctx.stream())
    glue.check(lib, rc, "kb_allreduce_rmsnorm")
    return normed, new_residual
