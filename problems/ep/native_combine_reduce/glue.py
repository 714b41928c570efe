import ctypes
import torch
from pytest_kernelbench.rank import glue


# ---- glue (hidden): one IPC buffer per rank (flags, two parities of tags and fp32 slots) -------------
def native_setup(lib, ctx):
    max_tokens = max(int(c["tokens"]) for c in ctx.sizes.values())
    max_elems = max(int(c["tokens"]) * int(c["hidden"]) for c in ctx.sizes.values())
    glue.check(lib, glue.declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")
    ll = ctypes.c_longlong
    nbytes = glue.declare(lib, "kb_buffer_bytes", ctypes.c_size_t, ctypes.c_int, ll, ll)(ctx.world, max_tokens, max_elems)
    bufs = glue.ipc_buffers(lib, ctx, nbytes)
    setup = glue.declare(lib, "kb_setup", ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ll, ll)
    glue.check(lib, setup(ctx.rank, ctx.world, bufs, max_tokens, max_elems), "kb_setup")
    torch.cuda.synchronize(ctx.device)
    glue.exchange(None)          # every rank mapped every buffer before anyone's first call
    p, i = ctypes.c_void_p, ctypes.c_int
    ctx.state["fn"] = glue.declare(lib, "kb_combine", i, p, p, p, p, p, i, i, i, p)


def native_call(lib, inputs, ctx):
    expert_out, weights, src_rank, src_token, num_tokens = inputs
    rows, h = expert_out.shape
    out = torch.empty(num_tokens, h, dtype=expert_out.dtype, device=expert_out.device)
    rc = ctx.state["fn"](glue.ptr(expert_out), glue.ptr(weights), glue.ptr(src_rank), glue.ptr(src_token),
                         glue.ptr(out), rows, num_tokens, h, ctx.stream())
    glue.check(lib, rc, "kb_combine")
    return out
