import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): rank 0's NCCL unique id to every rank through the process group, then the
# communicator, the window and the device communicator (kb_setup, collective) ---------------------------
def native_setup(lib, ctx):
    data_bytes = glue.max_size(ctx, "n") * torch.tensor([], dtype=ctx.dtype).element_size()
    glue.check(lib, glue.declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")
    nbytes = glue.declare(lib, "kb_unique_id_bytes", ctypes.c_int)()
    uid = None
    if ctx.rank == 0:
        buf = ctypes.create_string_buffer(nbytes)
        glue.check(lib, glue.declare(lib, "kb_unique_id", ctypes.c_int, ctypes.c_char_p)(buf), "kb_unique_id")
        uid = buf.raw
    uid = glue.exchange(uid)[0]
    setup = glue.declare(lib, "kb_setup", ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong)
    glue.check(lib, setup(uid, ctx.rank, ctx.world, data_bytes), "kb_setup")
    torch.cuda.synchronize(ctx.device)
    glue.exchange(None)          # every rank's window zeroed and registered before anyone's first call
    ctx.state["fn"] = glue.declare(lib, "kb_all_reduce", ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_longlong, ctypes.c_void_p)


def native_call(lib, inputs, ctx):
    (x,) = inputs
    y = torch.empty_like(x)
    rc = ctx.state["fn"](glue.ptr(x), glue.ptr(y), x.numel() * x.element_size(), ctx.stream())
    glue.check(lib, rc, "kb_all_reduce")
    return y
