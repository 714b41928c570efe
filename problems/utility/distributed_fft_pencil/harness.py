import math

import torch


def inputs(size, rank, world_size, gen, device, dtype):
    ny, nx = size["ny"], size["nx"]
    assert ny % world_size == 0 and nx % world_size == 0
    # complex normal entries (real and imaginary parts ~ N(0, 1/2)): the orthonormal transform
    # keeps every output entry ~ the same
    return (torch.randn(ny // world_size, nx, generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    ny, nx, w = size["ny"], size["nx"], world_size
    local = ny * nx // w
    return {
        "link_bytes": (w - 1) / w * local * e,          # the transpose: all but 1/W of a rank's field leaves it
        "hbm_bytes": 2 * local * e,                     # read the rows, write the columns
        # below split radix's 34/9 N log2 N real flops for a complex FFT of N points
        "flops": 3 * local * math.log2(ny * nx),
    }
