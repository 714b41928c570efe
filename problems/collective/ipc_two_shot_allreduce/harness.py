import ctypes

import torch

from pytest_kernelbench.harnesslib import exact_values
from pytest_kernelbench.native import glue


def inputs(size, rank, world_size, gen, device, dtype):
    return (exact_values((size["n"],), gen, device, dtype),)     # sums exact in any order


def cost(size, world_size, dtype):
    b = size["n"] * torch.tensor([], dtype=dtype).element_size()
    w = world_size
    # two-shot: (W-1)/W of x leaves for the reduce-scatter, (W-1)/W of y arrives for the all-gather.
    # HBM: read x, write the staging copy, serve W chunk reads of it, write the reduced chunk and y,
    # serve the peers' reads of the reduced chunk: 5 x bytes in all.
    # Two dependent messages: the reduced chunk can be published only after every peer's chunk
    # arrived.
    return {"link_bytes": 2 * (w - 1) / w * b, "hbm_bytes": 5 * b, "flops": (w - 1) / w * size["n"], "messages": 2}


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
