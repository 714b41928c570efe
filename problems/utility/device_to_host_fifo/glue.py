import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): the ring is allocated once (pinned, mapped); out is fresh host memory per call -----
def native_setup(lib, ctx):
    glue.check(lib, glue.declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")
    glue.check(lib, glue.declare(lib, "kb_setup", ctypes.c_int)(), "kb_setup")
    ctx.state["fn"] = glue.declare(lib, "kb_d2h", ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int,
                                   ctypes.c_void_p, ctypes.c_void_p)


def native_call(lib, inputs, ctx):
    (x,) = inputs
    out = torch.empty((x.shape[0], 2), dtype=x.dtype)           # host memory
    rc = ctx.state["fn"](glue.ptr(x), x.shape[0], x.shape[1], glue.ptr(out), ctx.stream())
    glue.check(lib, rc, "kb_d2h")
    return out
