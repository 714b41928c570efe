import torch

KEYS = ("hidden", "heads", "kv_heads", "head_dim", "ffn")


def _numel(size):
    e, hq, hkv, d, f = (size[k] for k in KEYS)
    return 2 * hq * d * e + 2 * hkv * d * e + 3 * f * e + e


def inputs(size, rank, world_size, gen, device, dtype):
    # FSDP's flat parameter padded to a multiple of W; the padding holds garbage no output may use
    shard_len = -(-_numel(size) // world_size)
    shard = torch.randn(shard_len, generator=gen, device=device, dtype=dtype)
    return (shard, *(size[k] for k in KEYS))


def _segments(size, world, t):
    """(starts, lengths) in the flat parameter of what TP rank t returns (reference.py's layout)."""
    e, hq, hkv, d, f = (size[k] for k in KEYS)
    starts, lens, at = [], [], 0
    for rows_total, ncols, split in ((hq * d, e, "rows"), (hkv * d, e, "rows"), (hkv * d, e, "rows"),
                                     (e, hq * d, "cols"), (f, e, "rows"), (f, e, "rows"), (e, f, "cols")):
        if split == "rows":
            r = rows_total // world
            starts.append(torch.tensor([at + t * r * ncols]))
            lens.append(torch.tensor([r * ncols]))
        else:
            c = ncols // world
            starts.append(at + t * c + torch.arange(rows_total) * ncols)
            lens.append(torch.full((rows_total,), c))
        at += rows_total * ncols
    starts.append(torch.tensor([at]))          # the norm weight: every rank needs all of it
    lens.append(torch.tensor([e]))
    return torch.cat(starts), torch.cat(lens)


def _overlap(starts, lens, a, b):
    return int((torch.minimum(starts + lens, torch.tensor(b)) - torch.maximum(starts, torch.tensor(a))).clamp(min=0).sum())


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    w = world_size
    shard = -(-_numel(size) // w)
    need = [_segments(size, w, t) for t in range(w)]
    total = int(need[0][1].sum())                     # every TP rank returns as many elements
    held = [[_overlap(*need[t], s * shard, (s + 1) * shard) for s in range(w)] for t in range(w)]
    recv = [total - held[t][t] for t in range(w)]      # what TP rank t lacks in its own shard
    send = [sum(held[t][s] for t in range(w) if t != s) for s in range(w)]   # what rank s serves
    # the same without the norm weight, which every rank needs: one read of it may serve them all
    own = [[_overlap(need[t][0][:-1], need[t][1][:-1], s * shard, (s + 1) * shard) for s in range(w)] for t in range(w)]
    return {
        # the busiest rank's link: what it must receive, or what others need from its shard
        "link_bytes": max(max(recv), max(send)) * e,
        # it writes its outputs and reads, once, each element of its shard that one rank needs
        "hbm_bytes": max(total + sum(own[t][s] for t in range(w)) for s in range(w)) * e,
        "flops": 0,
    }
