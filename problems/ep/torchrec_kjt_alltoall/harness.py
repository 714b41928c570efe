import math

import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    b, f, d, rows, pool = size["batch"], size["features"], size["dim"], size["rows"], size["pool"]
    assert f % world_size == 0
    nnz = b * f * pool
    # lengths: nnz ids dropped on (feature, sample) slots, features skewed per call (hot features;
    # empty bags happen); KJT layout, feature-major: slot = feature * batch + sample
    skew = torch.rand((), generator=gen, device=device) * 1.5 + 0.5
    feature = (torch.rand(nnz, generator=gen, device=device).pow(skew) * f).long().clamp_(max=f - 1)
    slot = feature * b + torch.randint(0, b, (nnz,), generator=gen, device=device)
    lengths = torch.zeros(f * b, dtype=torch.int64, device=device)
    lengths.scatter_add_(0, slot, torch.ones(nnz, dtype=torch.int64, device=device))
    values = torch.randint(0, rows, (nnz,), generator=gen, device=device)
    # this rank's tables, on an exact grid: every float32 sum of a bag is exact whatever the order
    tables = exact_values((f // world_size, rows, d), gen, device, dtype)
    return lengths, values, tables


def cost(size, world_size, dtype):
    el = torch.tensor([], dtype=dtype).element_size()
    b, f, d, rows, pool, w = size["batch"], size["features"], size["dim"], size["rows"], size["pool"], world_size
    nnz = b * f * pool
    # the least any algorithm moves: the ids of features owned elsewhere (averaged over ranks, as
    # the skew moves load between them; ceil(log2 rows) bits each) and the pooled rows back. A
    # feature's referenced table rows could come instead of its pooled rows, never fewer than
    # min(batch, rows) rows per feature
    ids = (w - 1) / w * nnz * math.ceil(math.log2(rows)) / 8
    back = (w - 1) / w * f * min(b, rows) * d * el
    return {
        "link_bytes": ids + back,
        # read the ids, write the pooled rows and the output (the table reads left out: a bound)
        "hbm_bytes": nnz * 8 + 2 * b * f * d * el,
        "flops": nnz * d,
    }


def check(out, expected, inputs, tol):
    # exact: the tables hold grid values whose float32 bag sums are exact in any order
    bad = out != expected
    if bool(bad.any()):
        b, f = expected.shape[0], inputs[0].numel() // expected.shape[0]
        i = int(bad.reshape(-1).nonzero()[0])
        row, col = divmod(i, expected.shape[1])
        dim = expected.shape[1] // f
        raise AssertionError(f"{int(bad.view(b, f, dim).any(dim=2).sum())} of {b * f} pooled (sample, feature) rows "
                             f"differ (compared exactly: the sums are exact); first at sample {row}, feature "
                             f"{col // dim}, channel {col % dim}: expected {expected[row, col].item():g}, got "
                             f"{out[row, col].item():g}")
