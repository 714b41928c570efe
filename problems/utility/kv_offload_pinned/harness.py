import torch


def inputs(size, rank, world_size, gen, device, dtype):
    layers, nb, bs, h, d = (size[k] for k in ("layers", "num_blocks", "block_size", "kv_heads", "head_dim"))
    n, m = size["offload"], size["onload"]
    kv_cache = torch.randn(layers, 2, nb, bs, h, d, generator=gen, device=device, dtype=dtype)
    # scattered, distinct block ids; the blocks offloaded and the blocks onloaded never coincide
    perm = torch.randperm(nb, generator=gen, device=device)
    offload_ids, onload_ids = perm[:n], perm[n:n + m]
    host_in = torch.randn(m, layers, 2, bs, h, d, generator=gen, device=device, dtype=dtype)
    if host_in.device.type == "cuda":
        host_in = host_in.cpu()              # the host tier's blocks live in host memory
    return kv_cache, offload_ids, host_in, onload_ids


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    block = size["layers"] * 2 * size["block_size"] * size["kv_heads"] * size["head_dim"] * e
    return {
        "link_bytes": 0,        # one GPU; the blocks cross PCIe (no ceiling of its own in the roofline)
        # read the offloaded blocks from HBM, write the onloaded ones: what must touch device memory
        "hbm_bytes": (size["offload"] + size["onload"]) * block,
        "flops": 0,
    }
