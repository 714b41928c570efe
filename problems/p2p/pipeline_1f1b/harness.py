import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    m, n, h = size["microbatches"], size["tokens"], size["hidden"]
    # the micro-batch inputs live on the first stage, the loss gradients on the last one
    # the 1/8 grid in [-2, 2] (dy in [-4, 4]): through 8 stages of relu(h) + bias every activation
    # stays a multiple of 1/8 below 32 in magnitude, exact in bfloat16, so outputs are bit-exact
    x = exact_values((m if rank == 0 else 0, n, h), gen, device, dtype, lim=2.0)
    dy = exact_values((m if rank == world_size - 1 else 0, n, h), gen, device, dtype, lim=4.0)
    # mean -1/2 keeps about half of every stage's inputs negative (the ReLU mask matters)
    bias = exact_values((h,), gen, device, dtype, shift=-0.5, lim=2.0)
    return m, x, dy, bias


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    m, n, h, w = size["microbatches"], size["tokens"], size["hidden"], world_size
    a = m * n * h * e
    return {
        # an inner stage sends every activation forward and every gradient backward
        "link_bytes": (2 if w > 2 else 1) * a,
        "hbm_bytes": 4 * a,          # read inputs and gradients, write ys and dxs
        "flops": 3 * m * n * h,      # relu + add, mask multiply
        "messages": 2 * (w - 1),     # a microbatch through every stage and its gradient back
    }
