import torch

from pytest_kernelbench.harnesslib import assert_close_scaled


def inputs(size, rank, world_size, gen, device, dtype):
    t, h, dk, dv = size["tokens"], size["heads"], size["key_dim"], size["value_dim"]
    q = torch.randn(t, h, dk, generator=gen, device=device, dtype=dtype)
    k = torch.randn(t, h, dk, generator=gen, device=device, dtype=dtype)
    v = torch.randn(t, h, dv, generator=gen, device=device, dtype=dtype)
    # per-head decay rates from 0.1 to 4 per block of T tokens (geometric over heads, as Mamba2's
    # per-head A spreads them), jittered per token: a block's total decay runs from 0.9 to 0.02,
    # so the state entering a rank carries the earlier ranks' tokens and a candidate that drops,
    # reorders or misdecays it is far off on every head
    rates = 0.1 * 40.0 ** (torch.arange(h, device=device, dtype=torch.float32) / max(h - 1, 1)) / t
    jitter = torch.rand(t, h, generator=gen, device=device, dtype=torch.float32) + 0.5
    log_g = -(rates * jitter)
    return q, k, v, log_g


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    t, h, dk, dv, w = size["tokens"], size["heads"], size["key_dim"], size["value_dim"], world_size
    return {
        # every rank but the last must pass on what its block adds to the state: a [H, Dk, Dv]
        # state (bfloat16 at the least) or, where smaller, its raw keys and values
        "link_bytes": (w - 1) / w * min(h * dk * dv, t * h * (dk + dv)) * e,
        # read q, k, v and the fp32 decays; write out
        "hbm_bytes": t * h * (2 * dk + 2 * dv) * e + t * h * 4,
        # the recurrent form (k^T v into the state, q times the state) or, for short blocks, the
        # quadratic one (q k^T masked and decayed, times v): whichever is cheaper
        "flops": h * min(4 * t * dk * dv, t * t * (dk + dv)),
    }


def check(out, expected, inputs, tol):
    # sums of up to W*T decayed terms in fp32 in an order the algorithm picks: an atol that scales
    # with the output's rms (tol["atol"] is that fraction), plus tol["rtol"]
    assert_close_scaled(out, expected, tol["atol"], tol["rtol"])


