import math

import torch

from pytest_kernelbench.harnesslib import exact_values, rank_hit_probability

GROUP = 128


def inputs(size, rank, world_size, gen, device, dtype):
    t, h, e, k = size["tokens"], size["hidden"], size["experts"], size["topk"]
    assert e % world_size == 0 and k <= e and h % GROUP == 0
    # activations with outlier channel groups: each 128-channel group of a token scaled by 2^j,
    # j in [-3, 4] (a per-token scale in place of per-group ones is then far off)
    gain = torch.exp2(torch.randint(-3, 5, (t, h // GROUP, 1), generator=gen, device=device).to(dtype))
    tokens = (torch.randn(t, h // GROUP, GROUP, generator=gen, device=device, dtype=dtype) * gain).view(t, h)
    scores = torch.rand(t, e, generator=gen, device=device)
    topk_ids = scores.topk(k, dim=1).indices.contiguous()
    # combine (the other micro-batch): T*K expert output rows, sorted by (owner rank, token); the
    # values on exact grids (rows: multiples of 1/8 scaled by a power of two; weights: of 1/16),
    # so every product and every float32 sum over them is exact whatever the order
    rows = t * k
    expert_out = exact_values((rows, h), gen, device, dtype)
    weights = torch.randint(0, 16, (rows,), generator=gen, device=device).float() / 16
    key = torch.sort(torch.randint(0, world_size * t, (rows,), generator=gen, device=device)).values
    return tokens, topk_ids, e, expert_out, weights, key // t, key % t


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    t, h, k, w = size["tokens"], size["hidden"], size["topk"], world_size
    p, groups, rows = rank_hit_probability(size["experts"], size["topk"], w), h // GROUP, t * k
    # dispatch: a token's fp8 row to each other rank hosting one of its experts, with its scales
    # (a power-of-two scale fits a byte, which the task allows)
    dispatch = (w - 1) * p * t * (h + groups)
    # combine: rows of one (owner, token) pair may be summed first (float32 partials), so the
    # least is one bfloat16 row per distinct pair owned by another rank (weights applied by the
    # sender), with its token index; rows pick (owner, token) uniformly out of W*T
    distinct = w * t * (1 - (1 - 1 / (w * t)) ** rows)
    combine = (w - 1) / w * distinct * (h * el + math.ceil(math.log2(t)) / 8)
    return {
        "link_bytes": dispatch + combine,
        # read tokens, write the received fp8 rows and scales; read the expert rows, write out
        "hbm_bytes": t * h * el + w * p * t * (h + 4 * groups) + rows * h * el + t * h * el,
        "flops": 3 * t * h + 2 * rows * h,
    }


def _fp8_ulp(v):
    # spacing of float8_e4m3fn at |v|: 2^(e-3) for |v| in [2^e, 2^(e+1)), 2^-9 below 2^-6
    e = torch.floor(torch.log2(v.abs().clamp(min=2.0 ** -6)))
    return torch.exp2(e - 3)


def _first(bad):
    i = int(bad.reshape(-1).nonzero()[0])
    return divmod(i, bad.shape[-1]) if bad.dim() > 1 else (i, 0)


def check(out, expected, inputs, tol):
    q, scale, counts, combined = out
    eq, escale, ecounts, ecombined = expected
    if not torch.equal(counts, ecounts):
        j = int((counts != ecounts).nonzero()[0])
        raise AssertionError(f"out[2] (recv_counts): source rank {j}: expected {int(ecounts[j])} rows, got {int(counts[j])}")
    # combine: exact (grid values, float32 products and sums, one rounding to bfloat16 at the end)
    bad = combined != ecombined
    if bool(bad.any()):
        r, c = _first(bad)
        raise AssertionError(f"out[3] (combined): {int(bad.any(dim=1).sum())} of {ecombined.shape[0]} token rows differ "
                             f"(float32 sums of these values are exact); first at [{r}, {c}]: expected "
                             f"{ecombined[r, c].item():g}, got {combined[r, c].item():g}")
    # scales: amax / 448 (to 2^-20 relative), or a power of two in [amax / 448, 2 * amax / 448]
    # (the UE8M0 rounding up some kernels use); nothing else (a per-token or per-tensor scale)
    rel = (scale - escale).abs() <= escale * 2.0 ** -20
    mant, _ = torch.frexp(scale)
    pow2 = (mant == 0.5) & (scale >= escale * (1 - 2.0 ** -20)) & (scale <= 2 * escale * (1 + 2.0 ** -20))
    bad = ~(rel | pow2)
    if bool(bad.any()):
        r, g = _first(bad)
        raise AssertionError(f"out[1] (recv_scales): {int(bad.sum())} of {escale.numel()} group scales are neither "
                             f"amax/448 nor its power of two rounded up; first at row {r}, group {g}: expected "
                             f"{escale[r, g].item():.6g}, got {scale[r, g].item():.6g}")
    # values through their dequantized value q * scale: each side is within half an fp8 ulp (of
    # its own q, times its own scale) of the same bfloat16 input, so they differ by at most one
    # ulp of the larger q times the larger scale; a slack of 2^-6 for float32 rounding of x/scale
    rows = eq.shape[0]
    qf, eqf = q.float().view(rows, -1, GROUP), eq.float().view(rows, -1, GROUP)
    s, es = scale.unsqueeze(-1), escale.unsqueeze(-1)
    ulp = torch.maximum(_fp8_ulp(qf), _fp8_ulp(eqf)) * torch.maximum(s, es)
    bad = ~((qf * s - eqf * es).abs() <= ulp * (1 + 2.0 ** -6))
    if bool(bad.any()):
        bad = bad.view(rows, -1)
        r, c = _first(bad)
        raise AssertionError(f"out[0] (recv_tokens, fp8): {int(bad.sum())} of {eq.numel()} dequantized values (q * scale) "
                             f"differ by more than one float8_e4m3fn ulp; first at row {r}, channel {c}: expected "
                             f"q={eqf.view(rows, -1)[r, c].item():g} (x{escale[r, c // GROUP].item():.4g}), got "
                             f"q={qf.view(rows, -1)[r, c].item():g} (x{scale[r, c // GROUP].item():.4g})")
