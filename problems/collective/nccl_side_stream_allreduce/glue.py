import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): rank 0's NCCL unique id to every rank through the process group, then the
# communicator, side stream and events (kb_setup, collective) -------------------------------------------
def native_setup(lib, ctx):
    glue.init(lib, ctx)
    uid = glue.nccl_unique_id(lib, ctx)
    setup = glue.declare(lib, "kb_setup", ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_int)
    glue.check(lib, setup(uid, ctx.rank, ctx.world), "kb_setup")
    glue.entry_point(lib, ctx, "kb_all_reduce", *glue.X_Y_N_STREAM)
    ctx.state["abort"] = glue.declare(lib, "kb_abort", ctypes.c_int)


def native_call(lib, inputs, ctx):
    (x,) = inputs
    y = torch.empty_like(x)
    rc = ctx.state["fn"](glue.ptr(x), glue.ptr(y), x.numel(), ctx.stream())
    if rc != 0:
        why = glue.declare(lib, "kb_last_error", ctypes.c_char_p)()      # before the abort can overwrite it
        ctx.state["abort"]()
        raise RuntimeError(f"kb_all_reduce returned {rc}: {(why or b'').decode(errors='replace')}")
    return y
