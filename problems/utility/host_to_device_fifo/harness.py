import ctypes

import torch

from pytest_kernelbench.native import glue


def inputs(size, rank, world_size, gen, device, dtype):
    table = torch.randn(size["rows"], size["d"], generator=gen, device=device, dtype=dtype)
    row = torch.randint(0, size["rows"], (size["m"],), generator=gen, device=device, dtype=torch.int32)
    mult = torch.randint(1, 9, (size["m"],), generator=gen, device=device, dtype=torch.int32)
    items = torch.stack((row, mult), 1)
    if items.device.type == "cuda":
        items = items.cpu()          # the work list lives on the host
    return table, items


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    m, d = size["m"], size["d"]
    return {"link_bytes": 0,                       # one GPU; the items cross PCIe (8 bytes each)
            "hbm_bytes": (m + min(m, size["rows"])) * d * e,   # write y, read each used row at least once
            "flops": m * d}


# ---- glue (hidden): the ring is allocated once (pinned, mapped) ----------------------------------------
def native_setup(lib, ctx):
    glue.check(lib, glue.declare(lib, "kb_init", ctypes.c_int, ctypes.c_int)(ctx.device.index), "kb_init")
    glue.check(lib, glue.declare(lib, "kb_setup", ctypes.c_int)(), "kb_setup")
    ctx.state["fn"] = glue.declare(lib, "kb_h2d", ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p,
                                   ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def native_call(lib, inputs, ctx):
    table, items = inputs
    items = items.contiguous()
    y = table.new_empty((items.shape[0], table.shape[1]))
    rc = ctx.state["fn"](glue.ptr(items), items.shape[0], glue.ptr(table), table.shape[1], glue.ptr(y), ctx.stream())
    glue.check(lib, rc, "kb_h2d")
    return y
