import torch

from pytest_kernelbench.harnesslib import rank_hit_probability


def inputs(size, rank, world_size, gen, device, dtype):
    t, h, e, k = size["tokens"], size["hidden"], size["experts"], size["topk"]
    assert e % world_size == 0 and k <= e
    x = torch.randn(t, h, generator=gen, device=device, dtype=dtype)
    # the ranks of a uniformly random top-k routing (K distinct experts per token)
    topk_ids = torch.rand(t, e, generator=gen, device=device).topk(k, dim=1).indices
    in_rank = torch.zeros(t, world_size, dtype=torch.bool, device=device)
    in_rank.scatter_(1, topk_ids // (e // world_size), True)
    return x, in_rank


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    t, h, w = size["tokens"], size["hidden"], world_size
    rows = rank_hit_probability(size["experts"], size["topk"], w) * t                      # expected rows sent to (and received from) each rank
    row = h * el
    return {
        "link_bytes": (w - 1) * rows * (row + 4),  # the rows and their token ids; the atomics are small
        # read x and the routing once; a peer's row lands in this rank's buffer, is read back and
        # written out (the outputs are new every call: no peer can reach them); our own rows only
        # need writing out
        "hbm_bytes": t * row + t * w + 3 * (w - 1) * rows * row + rows * row,
        "flops": 0,
    }


def check(out, expected, inputs, tol):
    """The count exactly; the rows 0 .. count - 1 in any order: the same multiset of token ids (none
    lost, none duplicated, none foreign) and, matched by id, every row bit for bit."""
    (got_x, got_ids, got_n), (exp_x, exp_ids, exp_n) = out, expected
    if not torch.equal(got_n, exp_n):
        raise AssertionError(f"out[2] (recv_count): expected {exp_n.tolist()}, got {got_n.tolist()}")
    n = int(exp_n[0])
    got_sorted, got_order = got_ids[:n].long().sort()
    exp_sorted, exp_order = exp_ids[:n].long().sort()
    if not torch.equal(got_sorted, exp_sorted):
        got_set, exp_set = set(got_sorted.tolist()), set(exp_sorted.tolist())
        lost, foreign = sorted(exp_set - got_set), sorted(got_set - exp_set)
        dup = sorted(set(got_sorted[1:][got_sorted[1:] == got_sorted[:-1]].tolist()))
        raise AssertionError(f"out[1] (recv_ids): rows 0 .. {n - 1} do not hold each expected token once: "
                             f"{len(lost)} lost (first {lost[:4]}), {len(dup)} duplicated (first {dup[:4]}), "
                             f"{len(foreign)} not sent here (first {foreign[:4]})")
    bad = (got_x[:n][got_order] != exp_x[:n][exp_order]).any(dim=1)
    if bool(bad.any()):
        first, tokens = int(exp_sorted[bad.nonzero()[0, 0]]), inputs[0].shape[0]
        raise AssertionError(f"out[0] (recv_x): {int(bad.sum())} of {n} received rows differ from the token their "
                             f"id names; first: token {first % tokens} of rank {first // tokens}")
