import torch

from pytest_kernelbench.harnesslib import rank_hit_probability


def inputs(size, rank, world_size, gen, device, dtype):
    t, h, e, k = size["tokens"], size["hidden"], size["experts"], size["topk"]
    assert e % world_size == 0 and k <= e
    x = torch.randn(t, h, generator=gen, device=device, dtype=dtype)
    # the layout of a uniformly random top-k routing (K distinct experts per token)
    topk_ids = torch.rand(t, e, generator=gen, device=device).topk(k, dim=1).indices
    in_rank = torch.zeros(t, world_size, dtype=torch.bool, device=device)
    in_rank.scatter_(1, topk_ids // (e // world_size), True)
    slot = in_rank.int().cumsum(dim=0, dtype=torch.int32) - 1
    token_slot = torch.where(in_rank, slot, torch.full_like(slot, -1))
    num_tokens_per_rank = in_rank.sum(dim=0, dtype=torch.int32)
    return x, in_rank, token_slot, num_tokens_per_rank


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    t, h, w = size["tokens"], size["hidden"], world_size
    rows = rank_hit_probability(size["experts"], size["topk"], w) * t                      # expected rows sent to (and received from) each rank
    row = h * el
    return {
        "link_bytes": (w - 1) * rows * row + (w - 1) * 4,
        # read x; the W * rows received rows land here, are read back and written out; the layout
        "hbm_bytes": t * row + 3 * w * rows * row + t * w * 5 + w * 8,
        "flops": 0,
    }


def check(out, expected, inputs, tol):
    """Counts exactly; in block s of recv_x only rows 0 .. recv_counts[s] - 1, bit for bit."""
    (got_x, got_n), (exp_x, exp_n) = out, expected
    if not torch.equal(got_n, exp_n):
        raise AssertionError(f"out[1] (recv_counts): expected {exp_n.tolist()}, got {got_n.tolist()}")
    world, tokens, _ = exp_x.shape
    valid = torch.arange(tokens, device=exp_x.device)[None, :] < exp_n[:, None].long()
    bad = ((got_x != exp_x) & valid[:, :, None]).any(dim=2)
    if bool(bad.any()):
        s, r = (int(v) for v in bad.nonzero()[0])
        raise AssertionError(f"out[0] (recv_x): {int(bad.sum())} of {int(valid.sum())} received rows differ; first: "
                             f"block {s} (from rank {s}), row {r}")
