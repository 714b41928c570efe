import torch


def solution(x: torch.Tensor) -> torch.Tensor:
    # y = x * x + x as one fused elementwise kernel (addcmul: x + 1 * x * x): one read of x, one
    # write of y, as the TMA pipeline does
    return torch.addcmul(x, x, x)
