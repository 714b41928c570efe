import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): nothing to share; the device is set once -------------------------------------------
def native_setup(lib, ctx):
    glue.check(lib, glue.declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")
    ctx.state["fn"] = glue.declare(lib, "kb_widen", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_int, ctypes.c_int, ctypes.c_void_p)


def native_call(lib, inputs, ctx):
    (x,) = inputs
    rows, cols = x.shape
    y = torch.empty((rows, cols - 1), device=x.device, dtype=torch.float32)
    glue.check(lib, ctx.state["fn"](glue.ptr(x), glue.ptr(y), rows, cols, ctx.stream()), "kb_widen")
    return y
