import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    out = torch.empty_like(x)
    ops = [
        dist.P2POp(dist.isend, x, (rank + 1) % world),
        dist.P2POp(dist.irecv, out, (rank - 1) % world),
    ]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return out
