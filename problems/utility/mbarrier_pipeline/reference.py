import torch

_ONE = torch.tensor(1.0)    # a 0-dim CPU tensor is a scalar to a kernel on any device


def solution(x: torch.Tensor) -> torch.Tensor:
    # y = 2 x + 1 as one fused elementwise kernel (add's alpha): one read of x, one write of y
    return torch.add(_ONE, x, alpha=2)
