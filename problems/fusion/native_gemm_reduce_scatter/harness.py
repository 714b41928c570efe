import ctypes

import torch

from pytest_kernelbench.native import glue


def inputs(size, rank, world_size, gen, device, dtype):
    m, n, k = size["m"], size["n"], size["k"]
    assert m % (16 * world_size) == 0 and k % world_size == 0
    k_local = k // world_size
    a = torch.randn(m, k_local, generator=gen, device=device, dtype=dtype)
    # b ~ N(0, 1/k): each rank's partial product is ~N(0, 1/W) and the reduced output ~N(0, 1)
    b = (torch.randn(k_local, n, generator=gen, device=device, dtype=torch.float32) / k ** 0.5).to(dtype)
    return a, b


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    m, n, k, w = size["m"], size["n"], size["k"], world_size
    kl = k // w
    return {
        # partial products of the other ranks' rows go to their owners; bfloat16 partials are
        # allowed (the reference rounds its own to bfloat16), so that is the bound
        "link_bytes": (w - 1) / w * m * n * e,
        # read a and b; W partial tiles of this rank's rows land here and are read back; write the output
        "hbm_bytes": (m * kl + kl * n) * e + 2 * m * n * e + m // w * n * e,
        "flops": 2 * m * kl * n + (w - 1) * (m // w) * n,
    }


# ---- glue (hidden): one IPC buffer per rank (flags + two parities of fp32 slots), mapped everywhere ---------
def native_setup(lib, ctx):
    max_mn = max(int(c["m"]) * int(c["n"]) for c in ctx.sizes.values())
    glue.check(lib, glue.declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")
    nbytes = glue.declare(lib, "kb_buffer_bytes", ctypes.c_size_t, ctypes.c_longlong)(max_mn)
    bufs = glue.ipc_buffers(lib, ctx, nbytes)
    setup = glue.declare(lib, "kb_setup", ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong)
    glue.check(lib, setup(ctx.rank, ctx.world, bufs, max_mn), "kb_setup")
    torch.cuda.synchronize(ctx.device)
    glue.exchange(None)          # every rank mapped every buffer before anyone's first call
    p = ctypes.c_void_p
    ctx.state["fn"] = glue.declare(lib, "kb_gemm_rs", ctypes.c_int, p, p, p, ctypes.c_int, ctypes.c_int, ctypes.c_int, p)


def native_call(lib, inputs, ctx):
    a, b = inputs
    m, k = a.shape
    n = b.shape[1]
    out = torch.empty(m // ctx.world, n, dtype=a.dtype, device=a.device)
    glue.check(lib, ctx.state["fn"](glue.ptr(a), glue.ptr(b), glue.ptr(out), m, n, k, ctx.stream()), "kb_gemm_rs")
    return out
