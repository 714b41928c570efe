import torch
import torch.distributed as dist
import torch.nn.functional as F


def _grid(world):
    rows = 1 << ((world.bit_length() - 1) // 2)     # 2 -> 1x2, 4 -> 2x2, 8 -> 2x4
    return rows, world // rows


def _exchange(pairs):
    # pairs: [(peer, send tensor, recv tensor)]; all transfers of one phase in one batch
    ops = []
    for peer, send, recv in pairs:
        ops += [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()


def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    rows, cols = _grid(world)
    i, j = divmod(rank, cols)
    b, cin, h, wd = x.shape
    p = (w.shape[-1] - 1) // 2

    # padded tile; the halo stays zero at the global borders
    xp = x.new_zeros(b, cin, h + 2 * p, wd + 2 * p)
    xp[:, :, p:p + h, p:p + wd] = x

    # phase 1: left/right neighbours trade P columns
    pairs = []
    if j > 0:
        pairs.append((rank - 1, x[..., :p].contiguous(), x.new_empty(b, cin, h, p)))
    if j < cols - 1:
        pairs.append((rank + 1, x[..., wd - p:].contiguous(), x.new_empty(b, cin, h, p)))
    _exchange(pairs)
    for peer, _, recv in pairs:
        if peer < rank:
            xp[:, :, p:p + h, :p] = recv
        else:
            xp[:, :, p:p + h, p + wd:] = recv

    # phase 2: up/down neighbours trade P full-width rows, which carry the corners along
    pairs = []
    if i > 0:
        pairs.append((rank - cols, xp[:, :, p:2 * p].contiguous(), x.new_empty(b, cin, p, wd + 2 * p)))
    if i < rows - 1:
        pairs.append((rank + cols, xp[:, :, h:h + p].contiguous(), x.new_empty(b, cin, p, wd + 2 * p)))
    _exchange(pairs)
    for peer, _, recv in pairs:
        if peer < rank:
            xp[:, :, :p] = recv
        else:
            xp[:, :, p + h:] = recv

    return F.conv2d(xp, w)
