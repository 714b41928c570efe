import torch


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
