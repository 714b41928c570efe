import math

import torch

from pytest_kernelbench.harnesslib import exact_values, rank_hit_probability


def tokens_per_rank(size, world_size):
    """Uneven DP batches, fixed by the size: rank r holds (2r + 1) * T // W tokens (T/W to ~2T)."""
    t = size["tokens"]
    return [(2 * r + 1) * t // world_size for r in range(world_size)]


def _routing(size, world_size, device, shared_seed):
    """The routing of every rank's tokens, equal on every rank (each rank's y needs all of it)."""
    counts = tokens_per_rank(size, world_size)
    n, e, k = sum(counts), size["experts"], size["topk"]
    if device.type == "meta":
        return torch.empty(n, k, dtype=torch.int64, device=device), torch.empty(n, k, device=device)
    gen = torch.Generator(device=device)
    gen.manual_seed(0 if shared_seed is None else shared_seed & ((1 << 63) - 1))
    # K distinct experts per token, uniformly (cost() counts the ranks a token reaches as such)
    ids = torch.rand(n, e, generator=gen, device=device).topk(k, dim=1).indices.contiguous()
    # routing weights on a grid of 1/64 (the combine's y values are exact, these are only carried)
    weights = torch.randint(1, 64, (n, k), generator=gen, device=device).float() / 64
    return ids, weights


def inputs(size, rank, world_size, gen, device, dtype, shared_seed=None):
    device = torch.device(device)
    counts = tokens_per_rank(size, world_size)
    h, e = size["hidden"], size["experts"]
    assert e % world_size == 0 and size["topk"] <= e
    assert all(a < b for a, b in zip(counts, counts[1:])), "T_r must tell the ranks apart (check())"
    lo = sum(counts[:rank])
    ids, weights = _routing(size, world_size, device, shared_seed)
    other, _ = _routing(size, world_size, device, None if shared_seed is None else shared_seed ^ 0x5BD1E995)
    x = torch.randn(counts[rank], h, generator=gen, device=device, dtype=dtype)
    # this rank's partial expert outputs for every token of the other micro-batch (its own
    # routing): zero where none of the token's experts lives here (the expert layer writes nothing
    # there); exact values, so any sum order is exact
    y = exact_values((sum(counts), h), gen, device, dtype)
    here = (other // (e // world_size) == rank).any(dim=1, keepdim=True)
    y = torch.where(here, y, torch.zeros((), dtype=dtype, device=device))
    return (x, ids[lo:lo + counts[rank]].clone(), weights[lo:lo + counts[rank]].clone(), y,
            torch.tensor(counts, dtype=torch.int64, device=device), e)


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    w, h, k, e = world_size, size["hidden"], size["topk"], size["experts"]
    counts = tokens_per_rank(size, w)
    n, p, row = sum(counts), rank_hit_probability(size["experts"], size["topk"], w), size["hidden"] * el
    # the least any algorithm moves: a token crosses to each other rank hosting one of its experts
    # (the rows of other tokens may be left out of x_all), its routing to every rank (an expert id
    # fits a byte at E <= 256, a weight 4 bytes), and back only the partial rows that are nonzero
    # (a fraction p_hit of y's rows in the data).
    # The busiest rank (the most tokens) sets the time: its sends per direction
    route = k * (math.ceil(math.log2(e)) / 8 + 4)
    t = max(counts)
    sends = (w - 1) * t * (p * row + route) + p * (n - t) * row
    return {
        "link_bytes": sends,
        # read x and the nonzero rows of y, write the needed rows of x_all, the routing and out
        "hbm_bytes": t * row + p * n * row + p * n * row + n * k * 12 + t * row,
        "flops": (w - 1) * p * t * h,
    }


def check(out, expected, inputs, tol):
    x_all, ids_all, weights_all, combined = out
    ex, eids, ew, ecomb = expected
    # routing and the combined rows: compared exactly (y is on an exact grid: any order of the sum
    # over ranks, bfloat16 or float32, gives the same bits)
    for name, got, want in (("out[1] (topk_ids_all)", ids_all, eids), ("out[2] (topk_weights_all)", weights_all, ew),
                            ("out[3] (combined)", combined, ecomb)):
        bad = (got != want).reshape(want.shape[0], -1).any(dim=1)
        if bool(bad.any()):
            raise AssertionError(f"{name}: {int(bad.sum())} of {want.shape[0]} rows differ (compared exactly); "
                                 f"first at row {int(bad.nonzero()[0])}")
    # x_all: only the rows of tokens routed to this rank are the task's (the others may hold
    # anything), by the routing gathered from their senders
    counts = inputs[4].tolist()
    if inputs[0].shape[0] not in counts or sum(counts) != eids.shape[0]:
        raise AssertionError("input tokens_per_rank was modified")
    rank = counts.index(inputs[0].shape[0])       # T_r is strictly increasing in r (inputs())
    needed = (eids // (inputs[5] // len(counts)) == rank).any(dim=1)
    bad = (x_all != ex).any(dim=1) & needed
    if bool(bad.any()):
        raise AssertionError(f"out[0] (x_all): {int(bad.sum())} of {int(needed.sum())} rows of tokens routed to this "
                             f"rank are not exact copies; first at row {int(bad.nonzero()[0])}")
