import torch
import torch.distributed as dist

_PLANS = {}


def _params(e, hq, hkv, d, f):
    """(name, shape) of the trainer's parameters, in the order of its flat parameter."""
    return [("q_proj", (hq * d, e)), ("k_proj", (hkv * d, e)), ("v_proj", (hkv * d, e)),
            ("o_proj", (e, hq * d)), ("gate_proj", (f, e)), ("up_proj", (f, e)),
            ("down_proj", (e, f)), ("input_layernorm", (e,))]


def _wanted(t, world, dims, device):
    """Flat-parameter indices of TP rank t's outputs, in output order (qkv, o, gate_up, down, norm)."""
    offs, at = {}, 0
    for name, shape in _params(*dims):
        offs[name] = at
        at += torch.Size(shape).numel()
    e, hq, hkv, d, f = dims

    def rows(name, nrows, ncols):          # column-parallel: this rank's block of rows
        r = nrows // world
        return offs[name] + t * r * ncols + torch.arange(r * ncols, device=device)

    def cols(name, nrows, ncols):          # row-parallel: this rank's block of columns of every row
        c = ncols // world
        grid = torch.arange(nrows, device=device)[:, None] * ncols + torch.arange(c, device=device)
        return (offs[name] + t * c + grid).flatten()

    parts = [rows("q_proj", hq * d, e), rows("k_proj", hkv * d, e), rows("v_proj", hkv * d, e),
             cols("o_proj", e, hq * d),
             rows("gate_proj", f, e), rows("up_proj", f, e),
             cols("down_proj", e, f),
             offs["input_layernorm"] + torch.arange(e, device=device)]
    return torch.cat(parts)


def _plan(shard_len, rank, world, dims, device):
    """Which of my elements go to which TP rank, and where the received ones land (once per shape)."""
    key = (shard_len, rank, world, dims, str(device))
    if key not in _PLANS:
        sends, send_splits = [], []
        for t in range(world):
            w = _wanted(t, world, dims, device)
            mine = w[w // shard_len == rank] - rank * shard_len
            sends.append(mine)
            send_splits.append(mine.numel())
            if t == rank:
                owner = w // shard_len
                order = torch.argsort(owner, stable=True)       # received grouped by owner
                unpack = torch.empty_like(order)
                unpack[order] = torch.arange(order.numel(), device=device)
                recv_splits = torch.bincount(owner, minlength=world).tolist()
        _PLANS[key] = (torch.cat(sends), send_splits, recv_splits, unpack)
    return _PLANS[key]


def solution(shard: torch.Tensor, hidden: int, heads: int, kv_heads: int, head_dim: int, ffn: int):
    rank, world = dist.get_rank(), dist.get_world_size()
    dims = (hidden, heads, kv_heads, head_dim, ffn)
    send_idx, send_splits, recv_splits, unpack = _plan(shard.numel(), rank, world, dims, shard.device)

    # one exchange: every element goes straight to the TP rank that needs it
    send = shard.index_select(0, send_idx)
    recv = shard.new_empty(sum(recv_splits))
    dist.all_to_all_single(recv, send, recv_splits, send_splits)
    flat = recv.index_select(0, unpack)

    e, hq, hkv, d, f = dims
    shapes = [((hq + 2 * hkv) * d // world, e), (e, hq * d // world), (2 * f // world, e), (e, f // world), (e,)]
    outs = flat.split([torch.Size(s).numel() for s in shapes])
    return tuple(o.view(s) for o, s in zip(outs, shapes))
