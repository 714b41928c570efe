import torch

# E[silu(g)^2] for g ~ N(0, 1): scales w_down so that the output is ~N(0, 1) whatever the sizes
_SILU_SQ = 0.356


def inputs(size, rank, world_size, gen, device, dtype):
    m, h, f = size["m"], size["hidden"], size["ffn"]
    assert f % world_size == 0
    fl = f // world_size
    x = torch.randn(m, h, generator=gen, device=device, dtype=dtype)
    # gate and up ~ N(0, 1) per element; the summed output ~ N(0, 1)
    w_gate_up = (torch.randn(h, 2 * fl, generator=gen, device=device, dtype=torch.float32) / h ** 0.5).to(dtype)
    w_down = (torch.randn(fl, h, generator=gen, device=device, dtype=torch.float32)
              / (f * _SILU_SQ) ** 0.5).to(dtype)
    return x, w_gate_up, w_down


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    m, h, w = size["m"], size["hidden"], world_size
    fl = size["ffn"] // w
    t = w * m                                                  # every token of the sequence
    return {
        # all-gather of x, then reduce-scatter of the bf16 [T, h] partial (the task allows a
        # bf16 sum over ranks): each ships (W-1) blocks of [m, h]
        "link_bytes": 2 * (w - 1) * m * h * e,
        # read x and the three weight blocks, write the output block; the [T, 2*f_local]
        # intermediate may stay on chip (a fused kernel), so it is not charged
        "hbm_bytes": (m * h + 3 * h * fl + m * h) * e,
        "flops": 2 * t * h * 2 * fl + 2 * t * fl * h,
    }
