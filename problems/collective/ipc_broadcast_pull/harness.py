import ctypes

import torch

from pytest_kernelbench.native import glue

ROOT = 0


def inputs(size, rank, world_size, gen, device, dtype):
    # Every rank gets different data, so a candidate that returns its own x fails off the root.
    return (torch.randn(size["n"], generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype):
    b = size["n"] * torch.tensor([], dtype=dtype).element_size()
    w = world_size
    # the root's GPU, the busiest: every other rank pulls x from it over the links (a pull design
    # by the problem's statement); HBM: read x, write the staged copy and y, serve the W-1 pulls.
    return {"link_bytes": (w - 1) * b, "hbm_bytes": (w + 2) * b, "flops": 0}


# ---- glue (hidden): one IPC buffer per rank (flags + two staging buffers), mapped everywhere ---------
def native_setup(lib, ctx):
    data_bytes = glue.max_size(ctx, "n") * torch.tensor([], dtype=ctx.dtype).element_size()
    glue.check(lib, glue.declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")
    nbytes = glue.declare(lib, "kb_buffer_bytes", ctypes.c_size_t, ctypes.c_longlong)(data_bytes)
    bufs = glue.ipc_buffers(lib, ctx, nbytes)
    setup = glue.declare(lib, "kb_setup", ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                         ctypes.c_longlong)
    glue.check(lib, setup(ctx.rank, ctx.world, ROOT, bufs, data_bytes), "kb_setup")
    torch.cuda.synchronize(ctx.device)
    glue.exchange(None)          # every rank mapped every buffer before anyone's first call
    ctx.state["fn"] = glue.declare(lib, "kb_broadcast", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_longlong, ctypes.c_void_p)


def native_call(lib, inputs, ctx):
    (x,) = inputs
    y = torch.empty_like(x)
    rc = ctx.state["fn"](glue.ptr(x), glue.ptr(y), x.numel() * x.element_size(), ctx.stream())
    glue.check(lib, rc, "kb_broadcast")
    return y
