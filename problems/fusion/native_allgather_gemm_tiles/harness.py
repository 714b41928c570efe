import ctypes

import torch

from pytest_kernelbench.native import glue


def inputs(size, rank, world_size, gen, device, dtype):
    m, k, n = size["m"], size["k"], size["n"]
    a = torch.randn(m, k, generator=gen, device=device, dtype=dtype)
    # b ~ N(0, 1/k) keeps every output element ~ N(0, 1) whatever k is
    b = (torch.randn(k, n, generator=gen, device=device, dtype=torch.float32) / k ** 0.5).to(dtype)
    return a, b


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    m, k, n, w = size["m"], size["k"], size["n"], world_size
    return {
        "link_bytes": (w - 1) * m * k * e,                      # this rank's rows go to every peer
        # read a and b, the peers' rows land here and are read back, write the output
        "hbm_bytes": (m * k + k * n + 2 * (w - 1) * m * k + w * m * n) * e,
        "flops": 2 * w * m * k * n,
    }


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
