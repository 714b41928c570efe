import torch


def inputs(size, rank, world_size, gen, device, dtype):
    assert size["n"] % world_size == 0
    return (torch.randn(size["n"], generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["n"], world_size
    return {
        # rank 0 takes in (W-1)*n elements (gather) while sending (W-1)/W*n (scatter) over
        # full-duplex links: the gather side bounds it
        "link_bytes": (w - 1) * n * e,
        "hbm_bytes": n * e + w * n * e + n // w * e,   # read x, write gathered + scattered
        "flops": 0,
    }
