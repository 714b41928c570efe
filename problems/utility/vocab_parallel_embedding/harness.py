import torch


def inputs(size, rank, world_size, gen, device, dtype):
    t, v, h = size["tokens"], size["vocab"], size["hidden"]
    assert t % world_size == 0 and v % world_size == 0
    # this rank's T/W consecutive token ids, uniform over the whole vocabulary
    ids_shard = torch.randint(0, v, (t // world_size,), generator=gen, device=device, dtype=torch.int64)
    table = torch.randn(v // world_size, h, generator=gen, device=device, dtype=dtype)
    return ids_shard, table


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    t, h, w = size["tokens"], size["hidden"], world_size
    return {
        # gather the ids; then the expected (W-1)/W of the T rows this rank does not own must
        # arrive from their owners (the lower bound; an all-reduce of [T, H] sends twice that)
        "link_bytes": (w - 1) / w * t * 8 + (w - 1) / w * t * h * e,
        "hbm_bytes": (t // w * h + t * h) * e + t * 8,   # read the owned rows, write [T, H]
        "flops": 0,
    }
