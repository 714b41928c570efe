"""The oracles of issue 49's ep/moe_agrs_dispatch_combine, ep/moe_dispatch_fp8 and
ep/torchrec_kjt_alltoall, end to end on CPU (gloo, W = 2): planted wrong kernels (a rank's
contribution skipped, tokens gathered in the wrong rank order, a per-token scale where groups are
asked, no quantization, the fp8 rows of the wrong tokens, a wrong peer order) fail as mismatches, and an honest variant the fp8 task allows (power-of-two scales,
multiplying by the reciprocal) passes. Each kernel is its problem's reference with one change, so
the test also shows that the change alone is what the check sees. One inner run for all.
"""
from __future__ import annotations

import pytest
from kbrun import PROBLEMS, by_problem, explain, make_tree, run

pytestmark = pytest.mark.e2e      # runs an inner pytest with ranks (tests/e2e_guard.py)


def _edit(problem: str, *changes: tuple[str, str]) -> str:
    """The problem's reference with each (old, new) replaced once (the old text must be there)."""
    src = (PROBLEMS / problem / "reference.py").read_text()
    for old, new in changes:
        assert src.count(old) == 1, f"{problem}/reference.py no longer holds {old!r}"
        src = src.replace(old, new)
    return src


AGRS, FP8, KJT = "ep/moe_agrs_dispatch_combine", "ep/moe_dispatch_fp8", "ep/torchrec_kjt_alltoall"

# name -> (base problem, candidate source, the output its mismatch names; None: an honest kernel that passes)
KERNELS = {
    # the last rank's partial outputs never reach the reduce-scatter
    "agrs_skip_rank": (AGRS, _edit(AGRS, ("    y_pad = y.new_zeros(world * t_max, hidden)\n",
                                          "    y_pad = y.new_zeros(world * t_max, hidden)\n"
                                          "    if dist.get_rank() == world - 1:\n"
                                          "        y = torch.zeros_like(y)\n")), "out[3] (combined)"),
    # x gathered in the wrong rank order (x_all's rows are checked only where routed here)
    "agrs_x_peer_order": (AGRS, _edit(AGRS, ("    x_all, ids_all, weights_all = (g.index_select(0, valid) for g in gathered)\n",
                                             "    gathered[0] = gathered[0].view(world, t_max, hidden).flip(0).reshape(world * t_max, hidden)\n"
                                             "    x_all, ids_all, weights_all = (g.index_select(0, valid) for g in gathered)\n")),
                          "out[0] (x_all)"),
    # the fp8 rows of the wrong tokens (each row's neighbour) with the right scales
    "fp8_wrong_rows": (FP8, _edit(FP8, ("    send_q = q.view(torch.uint8).index_select(0, token_idx)\n",
                                        "    send_q = q.view(torch.uint8).index_select(0, token_idx.roll(1))\n")), "out[0] (recv_tokens"),
    # one scale per token (the row's amax) in every group slot
    "fp8_per_token_scale": (FP8, _edit(FP8, ("    scale = groups.abs().amax(dim=-1).clamp(min=1e-4) / FP8_MAX\n",
                                             "    scale = groups.abs().amax(dim=(-1, -2), keepdim=True).clamp(min=1e-4) "
                                             "/ FP8_MAX\n    scale = scale.squeeze(-1).expand(rows, hidden // GROUP)"
                                             ".contiguous()\n")), "out[1] (recv_scales)"),
    # no quantization: a plain cast to fp8 (values clamped), scales of 1
    "fp8_unscaled_cast": (FP8, _edit(FP8, ("    q = (groups / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(FP8)\n",
                                           "    q = groups.clamp(-FP8_MAX, FP8_MAX).to(FP8)\n"
                                           "    scale = torch.ones_like(scale)\n")), "out[1] (recv_scales)"),
    # honest: UE8M0 scales (amax / 448 rounded up to a power of two) and x * (1 / scale)
    "fp8_ue8m0_honest": (FP8, _edit(FP8, ("    scale = groups.abs().amax(dim=-1).clamp(min=1e-4) / FP8_MAX\n",
                                          "    scale = torch.exp2(torch.ceil(torch.log2(groups.abs().amax(dim=-1)"
                                          ".clamp(min=1e-4) / FP8_MAX)))\n"),
                                         ("(groups / scale.unsqueeze(-1))", "(groups * (1.0 / scale).unsqueeze(-1))")),
                         None),
    # pooled rows put back in the wrong owner order (owners reversed)
    "kjt_peer_order": (KJT, _edit(KJT, ("    return out.view(world * local, batch, dim)",
                                        "    out = out.view(world, local * batch * dim).flip(0)\n"
                                        "    return out.view(world * local, batch, dim)")), "pooled (sample, feature) rows differ"),
}


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("p49b")
    for base in (AGRS, FP8, KJT):
        mine = {name: src for name, (b, src, _) in KERNELS.items() if b == base}
        problems, solutions = make_tree(root, mine, base=base)
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-timeout=120", "-n", "2")
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return by_problem(doc)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_planted_kernels_fail_as_mismatch_and_the_honest_variant_passes(judged, name):
    it, names = judged[f"ep/{name}"], KERNELS[name][2]
    if names is None:
        assert it["outcome"] == "passed", explain(it)
    else:
        assert it["outcome"] == "failed" and it["failure"] == "mismatch" and names in it["message"], explain(it)
