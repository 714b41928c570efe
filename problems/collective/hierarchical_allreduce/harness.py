import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    return (exact_values((size["n"],), gen, device, dtype),)


def cost(size, world_size, dtype, nodes=1):
    """Per GPU, the least of any algorithm: the node's sum of each element must leave the node
    once and come back once per other node (2 (N-1)/N of n over the node's L network cards), and
    inside the node a reduce-scatter and an all-gather over NVLink (2 (L-1)/L of n). The two
    kinds of link work at the same time (metrics/roofline.py)."""
    e = torch.tensor([], dtype=dtype).element_size()
    n, w = size["n"], world_size
    local = w // nodes
    return {
        "link_bytes": 2 * (local - 1) / local * n * e,
        "inter_node_bytes": 2 * (nodes - 1) / (nodes * local) * n * e,
        "hbm_bytes": 2 * n * e,                  # read x, write out
        "flops": (w - 1) / w * n,                # this rank's share of the adds
    }
