import ctypes
import math

import torch

from pytest_kernelbench.native import glue


def inputs(size, rank, world_size, gen, device, dtype):
    t, h, k = size["tokens"], size["hidden"], size["topk"]
    rows = t * k   # the average load: W*T*K (token, expert) pairs spread over W ranks
    expert_out = torch.randn(rows, h, generator=gen, device=device, dtype=dtype)
    weights = torch.rand(rows, generator=gen, device=device, dtype=torch.float32)
    # uneven splits over owners: sources drawn with a per-rank skew u**a, a in [0.4, 2.5)
    skew = torch.rand((), generator=gen, device=device) * 2.1 + 0.4
    u = torch.rand(rows, generator=gen, device=device)
    src = (u.pow(skew) * world_size).long().clamp_(max=world_size - 1)
    tok = torch.randint(0, t, (rows,), generator=gen, device=device)
    key = torch.sort(src * t + tok).values
    return expert_out, weights, key // t, key % t, t


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    t, h, k, w = size["tokens"], size["hidden"], size["topk"], world_size
    rows = t * k
    pairs = w * t * (1 - math.exp(-rows / (w * t)))    # expected distinct (owner, token) pairs of one rank's rows
    return {
        # the rows for other ranks, as bfloat16 rows with weight and index or as fp32 sums per
        # (owner, token) pair, whichever is smaller
        "link_bytes": (w - 1) / w * min(rows * (h * el + 12), pairs * (h * 4 + 4)),
        # read the rows, weights and indices; write this rank's tokens
        "hbm_bytes": rows * (h * el + 20) + t * h * el,
        "flops": 2 * rows * h,
    }


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
