import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    """x: float32 [rounds, msg]. Pairs (2i, 2i + 1): the even rank pings, the odd rank pongs."""
    rank = dist.get_rank()
    peer = rank ^ 1
    y = torch.empty_like(x)
    for k in range(x.shape[0]):
        if rank % 2 == 0:
            m = x[k] if k == 0 else y[k - 1] + x[k]
            dist.send(m.contiguous(), peer)
            dist.recv(y[k], peer)              # r_k = m_k + the ponger's x[k]
        else:
            dist.recv(y[k], peer)              # m_k
            dist.send(y[k] + x[k], peer)
    return y
