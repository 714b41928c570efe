import torch

from pytest_kernelbench.harnesslib import assert_close_scaled

# which tensor of a chunk a generator draws (its seed mixes the run's shared seed, the chunk and this)
_Q, _K, _V, _DO = range(4)


def _draw(shared_seed, chunk, what, shape, device, offset_span):
    g = torch.Generator(device=device)
    g.manual_seed((shared_seed * 1_000_003 + chunk * 8 + what) % (1 << 63))
    x = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
    if offset_span:
        # a per-chunk, per-head, per-channel offset: each chunk's share of a gradient is then
        # coherent (not a sum of random signs), so a skipped, doubled or wrongly masked block moves
        # the result by a large fraction of its rms
        b, h, _, d = shape
        x += (torch.rand(1, h, 1, d, generator=g, device=device) * 2 - 1) * offset_span
    return x.to(torch.bfloat16)


def _attention(q, k, v, scale, causal):
    if q.is_cuda:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, is_causal=causal, scale=scale)[:2]
    else:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=causal, scale=scale)
    return out.float(), lse.unsqueeze(-1)


def inputs(size, rank, world_size, gen, device, dtype, shared_seed=None):
    b, h, c, d = size["batch"], size["heads"], size["chunk"], size["head_dim"]
    shape = (b, h, c, d)
    local = (b, h, 2 * c, d)
    device = torch.device(device)
    if device.type == "meta":
        return tuple(torch.empty(local, device=device, dtype=dtype) for _ in range(5)) + \
            (torch.empty(b, h, 2 * c, device=device, dtype=torch.float32),)
    if shared_seed is None:    # outside a checker (format tests): one draw of gen stands in for it
        shared_seed = int(torch.randint(1 << 62, (1,), generator=gen, device=device).item())
    scale = d ** -0.5
    mine = (rank, 2 * world_size - 1 - rank)
    keys = {j: _draw(shared_seed, j, _K, shape, device, 0) for j in range(mine[1] + 1)}
    vals = {j: _draw(shared_seed, j, _V, shape, device, 2.0) for j in range(mine[1] + 1)}
    qs, outs, dos, lses = [], [], [], []
    for j in mine:
        q = _draw(shared_seed, j, _Q, shape, device, 0)
        # the forward pass of chunk j's queries: its own chunk (causal) merged with every earlier one
        out, lse = _attention(q, keys[j], vals[j], scale, causal=True)
        if j:
            k_before = torch.cat([keys[i] for i in range(j)], dim=2)
            v_before = torch.cat([vals[i] for i in range(j)], dim=2)
            out2, lse2 = _attention(q, k_before, v_before, scale, causal=False)
            new = torch.logaddexp(lse, lse2)
            out = out * torch.exp(lse - new) + out2 * torch.exp(lse2 - new)
            lse = new
        qs.append(q)
        outs.append(out.to(torch.bfloat16))
        lses.append(lse.squeeze(-1))
        dos.append(_draw(shared_seed, j, _DO, shape, device, 1.0))
    cat = lambda xs: torch.cat(xs, dim=2).contiguous()  # noqa: E731
    return (cat(qs), cat([keys[j] for j in mine]), cat([vals[j] for j in mine]), cat(outs), cat(dos), cat(lses))


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    b, h, c, d, w = size["batch"], size["heads"], size["chunk"], size["head_dim"], world_size
    chunk = b * h * c * d                  # one chunk of one tensor
    # causal (query, key) pairs of this rank's two query chunks: 2W * C^2 (see zigzag forward)
    pairs = 2 * w * c * c
    return {
        # every pair of ranks shares two attention blocks (r's late chunk sees s's chunks, s's
        # chunks see r's early chunk); each needs one side's chunk pair (q and dout, or k and v) to
        # cross, at least in bfloat16, and one gradient chunk back: 3 chunk tensors per block, so
        # 6 per pair, i.e. 3 (W-1) chunks sent per rank on average, whatever travels
        "link_bytes": 3 * (w - 1) * chunk * e,
        # read q, k, v, out, dout and lse, write dq, dk, dv
        "hbm_bytes": 8 * 2 * chunk * e + b * h * 2 * c * 4,
        # five matmuls over the unmasked pairs: S = QK^T (recomputed), dP = dO V^T, dV = P^T dO,
        # dQ = dS K, dK = dS^T Q
        "flops": 10 * b * h * pairs * d,
        "messages": 2,                     # operands out, gradients back
    }


def check(out, expected, inputs, tol):
    # the gradients are sums over the ring in an order the algorithm picks: compare with an atol
    # that scales with each gradient's rms (tol["atol"] is that fraction), plus tol["rtol"]
    assert_close_scaled(out, expected, tol["atol"], tol["rtol"])
