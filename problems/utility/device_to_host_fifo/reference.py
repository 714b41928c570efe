import torch


def solution(x: torch.Tensor) -> torch.Tensor:
    """x: float32 [m, d] on the GPU. Returns float32 [m, 2] on the host: (sum, max) of each row."""
    return torch.stack((x.sum(1), x.amax(1)), 1).cpu()
