
import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    t, h = size["tokens"], size["hidden"]
    x = exact_values((t, h), gen, device, dtype)
    # gen is per rank, so residual and weight differ per rank (the task text says so)
    residual = torch.randn(t, h, generator=gen, device=device, dtype=dtype)
    weight = (1 + 0.25 * torch.randn(h, generator=gen, device=device, dtype=torch.float32)).to(dtype)
    return x, residual, weight


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    t, h, w = size["tokens"], size["hidden"], world_size
    n = t * h
    return {
        "link_bytes": 2 * (w - 1) / w * n * e,        # all-reduce of x
        # read x, residual, weight; write new_residual (bf16), q (1 byte), scales
        "hbm_bytes": 3 * n * e + n + h * e + t * 4,
        "flops": (w - 1) / w * n + 8 * n,             # reduce adds + add, norm, amax, quantize
    }


def _fp8_ulp(v):
    # spacing of float8_e4m3fn at |v| (in fp8 units): 2^(e-3) for |v| in [2^e, 2^(e+1)),
    # 2^-9 in the subnormal range below 2^-6
    e = torch.floor(torch.log2(v.abs().clamp(min=2.0 ** -6)))
    return torch.exp2(e - 3)


def check(out, expected, inputs, tol):
    q, scale, res = out
    eq, escale, eres = expected
    # new_residual: plain bfloat16 tolerance
    r, er = res.float(), eres.float()
    bad = ~((r - er).abs() <= tol["atol"] + tol["rtol"] * er.abs())
    if bool(bad.any()):
        i = int(bad.reshape(-1).nonzero()[0])
        raise AssertionError(f"out[2] (new_residual): {int(bad.sum())} of {er.numel()} elements outside "
                             f"atol={tol['atol']:g} rtol={tol['rtol']:g}; first at flat index {i}: "
                             f"expected {er.reshape(-1)[i].item():.6g}, got {r.reshape(-1)[i].item():.6g}")
    # scales: the row amax may move by one bfloat16 ulp (2^-7 relative) when the norm's
    # rounding differs, so allow 2^-6 relative
    bad = ~((scale - escale).abs() <= escale.abs() * 2.0 ** -6)
    if bool(bad.any()):
        i = int(bad.reshape(-1).nonzero()[0])
        raise AssertionError(f"out[1] (scale): {int(bad.sum())} of {escale.numel()} per-token scales differ by more "
                             f"than 2^-6 relative; first at token {i}: expected {escale.reshape(-1)[i].item():.6g}, "
                             f"got {scale.reshape(-1)[i].item():.6g}")
    # quantized values, dequantized: each side is within half an fp8 ulp of its own normed
    # value, and the two normed values may differ by one bfloat16 ulp (2^-7 relative) when one
    # side skips or re-rounds the bfloat16 step: allow one fp8 ulp (of the larger magnitude,
    # times the larger scale) plus 2^-7 relative. Two fp8 ulps off always fails.
    qf, eqf = q.float(), eq.float()
    deq, edeq = qf * scale, eqf * escale
    ulp = torch.maximum(_fp8_ulp(qf), _fp8_ulp(eqf)) * torch.maximum(scale, escale)
    bad = ~((deq - edeq).abs() <= ulp * (1 + 2.0 ** -6) + edeq.abs() * 2.0 ** -7)
    if bool(bad.any()):
        n = int(bad.sum())
        i = int(bad.reshape(-1).nonzero()[0])
        row, col = divmod(i, eq.shape[-1])
        raise AssertionError(f"out[0] (fp8 values): {n} of {eq.numel()} dequantized values (q * scale) differ by more "
                             f"than one float8_e4m3fn ulp; first at [{row}, {col}]: expected q={eqf[row, col].item():g} "
                             f"(x{escale[row, 0].item():.4g}), got q={qf[row, col].item():g} (x{scale[row, 0].item():.4g})")
