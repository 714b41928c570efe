import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    cap, h = size["cap"], size["hidden"]
    x = exact_values((cap, h), gen, device, dtype)
    # sums over up to 8 ranks of this grid are exact: any reduction order gives the same bits
    y = exact_values((world_size * cap, h), gen, device, dtype)
    # this rank's own token count, in [cap/2, cap]: drawn per rank and per set, so a set refilled
    # on some ranks only (the harness's second anti-caching pass) stays a consistent problem
    count = torch.randint(cap // 2, cap + 1, (1,), generator=gen, device=device, dtype=torch.int64)
    return x, y, count


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    cap, h, w = size["cap"], size["hidden"], world_size
    lo = cap // 2               # the fewest tokens a rank has (inputs()): total >= W * lo
    return {
        # all-gather-v: the other ranks' tokens reach each rank, (W-1) total received in all, so
        # some GPU sends at least the average (W-1)/W total; reduce-scatter-v: each rank's rows for
        # the others must leave it, (W-1) total again. Only valid rows need to move; total >= W lo.
        # The counts (8 bytes a rank) can travel with the rows: one message.
        "link_bytes": 2 * (w - 1) * lo * h * e,
        # read its own tokens and y rows, write both outputs whole (their padding is zero)
        "hbm_bytes": (lo + w * lo + w * cap + cap) * h * e,
        "flops": (w - 1) * lo * h,       # this rank's share of the adds
        "messages": 1,
    }
