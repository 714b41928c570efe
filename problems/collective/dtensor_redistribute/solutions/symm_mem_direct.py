"""DTensor redistribute [Shard(0), Shard(0)] -> [Replicate(), Shard(1)] in one step over
symmetric memory: no all-to-all then all-gather, no padding.

Every rank's output [rows, c_j] lives in its symmetric buffer. A rank holding rows
[row0, row0 + r) writes, for every rank d, its columns of d's chunk straight into those
rows of d's buffer (a strided copy into peer memory over NVLink: each row block goes to
the two ranks of its mesh column at once), then one barrier, then it copies its own
buffer out. A barrier before the writes keeps a fast rank from overwriting a buffer its
peer is still copying out from the previous call.

Setup (first call per shape): symmetric allocation and rendezvous.
"""
import torch
import torch.distributed as dist

_state: dict = {}


def _chunk(n: int, k: int) -> list[int]:
    q = -(-n // k)
    return [max(0, min(q, n - i * q)) for i in range(k)]


def _setup(x: torch.Tensor, rows: int, cols: int):
    import torch.distributed._symmetric_memory as symm_mem
    world = dist.get_world_size()
    col = _chunk(cols, world // 2)
    buf = symm_mem.empty(max(1, rows * max(col)), dtype=x.dtype, device=x.device)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
    # our tensor may sit inside a larger pool block: peers' views start at the same offset in theirs
    base = (buf.data_ptr() - int(hdl.buffer_ptrs[dist.get_rank()])) // buf.element_size()
    return buf, hdl, base


def solution(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    world, rank = dist.get_world_size(), dist.get_rank()
    half = world // 2
    i, j = rank // half, rank % half
    key = (rows, cols, x.dtype)
    if key not in _state:
        _state[key] = _setup(x, rows, cols)
    buf, hdl, base = _state[key]
    outer = _chunk(rows, 2)
    inner = _chunk(outer[i], half)
    row0 = sum(outer[:i]) + sum(inner[:j])
    col = _chunk(cols, half)
    starts = [sum(col[:k]) for k in range(half)]
    r = x.shape[0]

    hdl.barrier()                     # every peer has copied out the previous call's result
    if r:
        for d in range(world):
            dj = d % half
            if col[dj]:
                dst = hdl.get_buffer(d, (rows, col[dj]), x.dtype, storage_offset=base)
                dst[row0:row0 + r].copy_(x[:, starts[dj]:starts[dj] + col[dj]])
    hdl.barrier()                     # every write into this rank's buffer has landed
    return buf[:rows * col[j]].view(rows, col[j]).clone()
