import math

import torch
import torch.distributed as dist


def solution(params: torch.Tensor, grads: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
             step: int, lr: float, beta1: float, beta2: float, eps: float, weight_decay: float):
    rank = dist.get_rank()
    shard = exp_avg.numel()
    lo = rank * shard

    # AdamW on this rank's shard only (the optimizer state exists only for it)
    p = params[lo:lo + shard].clone()
    g = grads[lo:lo + shard]
    m = exp_avg.clone()
    v = exp_avg_sq.clone()
    p.mul_(1 - lr * weight_decay)
    m.mul_(beta1).add_(g, alpha=1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    denom = (v.sqrt() / math.sqrt(bias_correction2)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / bias_correction1)

    # every rank gets the full updated parameters
    full = torch.empty_like(params)
    dist.all_gather_into_tensor(full, p)
    return full, m, v
