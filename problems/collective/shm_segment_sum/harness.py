import ctypes

import torch

from pytest_kernelbench.harnesslib import exact_values
from pytest_kernelbench.native import glue


def inputs(size, rank, world_size, gen, device, dtype):
    return (exact_values((size["n"],), gen, device, dtype),)     # sums exact in any order


def cost(size, world_size, dtype):
    b = size["n"] * torch.tensor([], dtype=dtype).element_size()
    return {"link_bytes": (world_size - 1) * b, "hbm_bytes": (world_size + 2) * b, "flops": (world_size - 1) * size["n"]}


# ---- glue (hidden): barrier + both parities of W slots in one shared segment -------------------------
def native_setup(lib, ctx):
    n_max = glue.max_size(ctx, "n")
    nbytes = glue.declare(lib, "kb_segment_bytes", ctypes.c_size_t, ctypes.c_int, ctypes.c_int64)(ctx.world, n_max)
    ctx.state.update(segment=glue.shared_segment(ctx, nbytes), n_max=n_max)
    ctx.state["fn"] = glue.declare(lib, "kb_all_reduce", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_int)


def native_call(lib, inputs, ctx):
    (x,) = inputs
    y = torch.empty_like(x)
    rc = ctx.state["fn"](ctx.state["segment"], glue.ptr(x), glue.ptr(y), x.numel(), ctx.state["n_max"],
                         ctx.rank, ctx.world)
    glue.check(lib, rc, "kb_all_reduce")
    return y
