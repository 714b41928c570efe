import ctypes
import torch
from pytest_kernelbench.rank import glue


# ---- glue (hidden): one IPC buffer per rank (flags, counts, two parities of receive blocks) -----------
def native_setup(lib, ctx):
    max_elems = max(int(c["tokens"]) * int(c["hidden"]) for c in ctx.sizes.values())
    glue.check(lib, glue.declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")
    nbytes = glue.declare(lib, "kb_buffer_bytes", ctypes.c_size_t, ctypes.c_int, ctypes.c_longlong)(ctx.world, max_elems)
    bufs = glue.ipc_buffers(lib, ctx, nbytes)
    setup = glue.declare(lib, "kb_setup", ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong)
    glue.check(lib, setup(ctx.rank, ctx.world, bufs, max_elems), "kb_setup")
    torch.cuda.synchronize(ctx.device)
    glue.exchange(None)          # every rank mapped every buffer before anyone's first call
    p, i = ctypes.c_void_p, ctypes.c_int
    ctx.state["fn"] = glue.declare(lib, "kb_dispatch", i, p, p, p, p, p, p, i, i, p)


def native_call(lib, inputs, ctx):
    x, in_rank, token_slot, per_rank = inputs
    t, h = x.shape
    recv_x = torch.empty(ctx.world, t, h, dtype=x.dtype, device=x.device)
    recv_counts = torch.empty(ctx.world, dtype=torch.int32, device=x.device)
    rc = ctx.state["fn"](glue.ptr(x), glue.ptr(in_rank), glue.ptr(token_slot), glue.ptr(per_rank),
                         glue.ptr(recv_x), glue.ptr(recv_counts), t, h, ctx.stream())
    glue.check(lib, rc, "kb_dispatch")
    return recv_x, recv_counts
