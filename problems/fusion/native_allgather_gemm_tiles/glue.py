import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): one IPC buffer per rank (flags + two parities of the gather buffer), mapped everywhere
def native_setup(lib, ctx):
    elems = ctx.world * max(int(c["m"]) * int(c["k"]) for c in ctx.sizes.values())
    glue.check(lib, glue.declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")
    nbytes = glue.declare(lib, "kb_buffer_bytes", ctypes.c_size_t, ctypes.c_longlong)(elems)
    bufs = glue.ipc_buffers(lib, ctx, nbytes)
    setup = glue.declare(lib, "kb_setup", ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong)
    glue.check(lib, setup(ctx.rank, ctx.world, bufs, elems), "kb_setup")
    torch.cuda.synchronize(ctx.device)
    glue.exchange(None)          # every rank mapped every buffer before anyone's first call
    p = ctypes.c_void_p
    ctx.state["fn"] = glue.declare(lib, "kb_ag_gemm", ctypes.c_int, p, p, p, ctypes.c_int, ctypes.c_int, ctypes.c_int, p)


def native_call(lib, inputs, ctx):
    a, b = inputs
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty(ctx.world * m, n, dtype=a.dtype, device=a.device)
    glue.check(lib, ctx.state["fn"](glue.ptr(a), glue.ptr(b), glue.ptr(c), m, n, k, ctx.stream()), "kb_ag_gemm")
    return c
