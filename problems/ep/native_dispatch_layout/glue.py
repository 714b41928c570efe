import ctypes

import torch

from pytest_kernelbench.rank import glue


# ---- glue (hidden): nothing to share; the device is set once -------------------------------------------
def native_setup(lib, ctx):
    glue.init(lib, ctx)
    p, i = ctypes.c_void_p, ctypes.c_int
    glue.entry_point(lib, ctx, "kb_dispatch_layout", p, p, p, p, i, i, i, i, p)


def native_call(lib, inputs, ctx):
    topk_ids, num_experts, num_ranks = inputs
    t, k = topk_ids.shape
    dev = topk_ids.device
    per_rank = torch.empty(num_ranks, dtype=torch.int32, device=dev)
    per_expert = torch.empty(num_experts, dtype=torch.int32, device=dev)
    in_rank = torch.empty(t, num_ranks, dtype=torch.bool, device=dev)
    glue.call(lib, ctx, glue.ptr(topk_ids), glue.ptr(per_rank), glue.ptr(per_expert), glue.ptr(in_rank),
              t, k, num_experts, num_ranks, ctx.stream())
    return per_rank, per_expert, in_rank
