import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    """x: [tokens, hidden] activations of this stage. Returns the previous stage's activations
    (the first stage: an empty [0, hidden] tensor)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    req = dist.isend(x, rank + 1) if rank + 1 < world else None
    if rank > 0:
        y = torch.empty_like(x)
        dist.recv(y, rank - 1)
    else:
        y = x.new_empty((0, x.shape[1]))
    if req is not None:
        req.wait()
    return y
