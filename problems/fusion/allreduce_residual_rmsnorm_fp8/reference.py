import torch
import torch.distributed as dist

EPS = 1e-6
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


def solution(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
    reduced = x.clone()
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    new_residual = reduced.add_(residual)

    h = new_residual.float()
    rstd = torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + EPS)
    normed = (h * rstd * weight.float()).to(x.dtype).float()

    # dynamic per-token fp8 quantization
    scale = normed.abs().amax(dim=-1, keepdim=True).clamp(min=1e-10) / FP8_MAX
    q = (normed / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q, scale, new_residual
