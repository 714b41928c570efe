import torch
import torch.distributed as dist
import torch.nn.functional as F


def solution(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    b, c, n = x.shape
    pad = (w.shape[-1] - 1) // 2

    # halos stay zero at the two ends of the global sequence
    left = x.new_zeros(b, c, pad)
    right = x.new_zeros(b, c, pad)
    ops = []
    if rank > 0:
        ops += [dist.P2POp(dist.isend, x[:, :, :pad].contiguous(), rank - 1),
                dist.P2POp(dist.irecv, left, rank - 1)]
    if rank < world - 1:
        ops += [dist.P2POp(dist.isend, x[:, :, n - pad:].contiguous(), rank + 1),
                dist.P2POp(dist.irecv, right, rank + 1)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()

    return F.conv1d(torch.cat([left, x, right], dim=2), w, groups=c)
