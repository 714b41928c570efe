import torch

from pytest_kernelbench.harnesslib import rank_hit_probability


def inputs(size, rank, world_size, gen, device, dtype):
    t, h, e, k = size["tokens"], size["hidden"], size["experts"], size["topk"]
    assert e % world_size == 0 and k <= e
    x = torch.randn(t, h, generator=gen, device=device, dtype=dtype)
    scores = torch.rand(t, e, generator=gen, device=device)
    topk_ids = scores.topk(k, dim=1).indices.contiguous()
    return x, topk_ids, e


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    t, h, k, w = size["tokens"], size["hidden"], size["topk"], world_size
    return {
        # a token needs to cross the link once per other rank hosting one of its experts
        "link_bytes": (w - 1) * rank_hit_probability(size["experts"], size["topk"], w) * t * h * el + t * k * 4,
        # read the tokens, write the T*K received rows (on average) and their source ids
        "hbm_bytes": t * h * el + t * k * (h * el + 4),
        "flops": 0,
    }


def check(out, expected, inputs, tol):
    x, src, count = out
    ex, esrc, ecount = expected
    if not torch.equal(count, ecount):
        j = int((count != ecount).nonzero()[0])
        raise AssertionError(f"out[2] (recv_count): local expert {j}: expected {int(ecount[j])} rows, "
                             f"got {int(count[j])}")
    local, cap, _ = ex.shape
    valid = torch.arange(cap, device=ex.device).unsqueeze(0) < ecount.unsqueeze(1).long()
    sentinel = torch.tensor(1 << 40, device=ex.device)
    key = torch.where(valid, src.long(), sentinel)
    ekey = torch.where(valid, esrc.long(), sentinel)
    key, idx = key.sort(dim=1)
    ekey, eidx = ekey.sort(dim=1)
    if not torch.equal(key, ekey):
        j = int((key != ekey).any(dim=1).nonzero()[0])
        raise AssertionError(f"out[1] (recv_src): local expert {j} received a different set of "
                             f"(source rank, token) ids than expected")
    rows = x.gather(1, idx.unsqueeze(2).expand(-1, -1, x.shape[2]))
    erows = ex.gather(1, eidx.unsqueeze(2).expand(-1, -1, ex.shape[2]))
    # after sorting, the valid rows are the first recv_count of each expert
    bad = (rows != erows).any(dim=2) & valid
    if bool(bad.any()):
        j, i = (int(v) for v in bad.nonzero()[0])
        s, t = int(ekey[j, i]), inputs[0].shape[0]
        raise AssertionError(f"out[0] (recv_x): local expert {j}: the row for token {s % t} of source "
                             f"rank {s // t} is not an exact copy of that token")
    return None
