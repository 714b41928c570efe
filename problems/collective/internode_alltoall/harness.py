import torch


def inputs(size, rank, world_size, gen, device, dtype):
    assert size["n"] % world_size == 0
    return (torch.randn(size["n"], generator=gen, device=device, dtype=dtype),)


def cost(size, world_size, dtype, nodes=1):
    """Per GPU, the least of any algorithm: the chunks for the other L-1 ranks of its node cross
    NVLink once, those for the W-L ranks of other nodes cross the network once (the two-stage
    exchange moves more over NVLink to send fewer, larger messages)."""
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["n"], world_size
    local = w // nodes
    return {
        "link_bytes": (local - 1) / w * n * e,
        "inter_node_bytes": (w - local) / w * n * e,
        "hbm_bytes": 2 * n * e,              # read x, write out
        "flops": 0,
    }
