"""metrics.roofline: the roof time of a cost, its bound, and the suspect flag."""
from __future__ import annotations

import pytest

from pytest_kernelbench.metrics import roofline


def test_roofline_takes_the_largest_term_and_flags_suspect_speed():
    ceilings = {"link_bw": 100.0, "hbm_bw": 1000.0, "peak_flops": 1e6}
    assert roofline.roof_time({"link_bytes": 200, "hbm_bytes": 1000, "flops": 10}, ceilings) == 2.0
    assert roofline.roof_time({"flops": 1}, {}) is None
    sizes = [{"cost": {"link_bytes": 100}, "timing": {"reference": {"median_s": 2.0}, "candidate": {"median_s": 0.5}}}]
    out = roofline.annotate(sizes, ceilings)
    assert sizes[0]["roofline"] == {"reference": 0.5, "candidate": 2.0}
    assert out["suspect"] is True and sizes[0]["suspect"] is True
    ok = [{"cost": {"link_bytes": 100}, "timing": {"reference": {"median_s": 2.0}, "candidate": {"median_s": 1.0}}}]
    assert roofline.annotate(ok, ceilings)["suspect"] is False


def test_roofline_latency_term_adds_to_link_time_per_dependent_message():
    c = {"link_bw": 100.0, "hbm_bw": 1000.0, "peak_flops": 1e6, "latency_s": 0.5}
    # one message wherever bytes cross a link, unless cost() says how many dependent steps
    assert roofline.roof_time({"link_bytes": 200}, c) == pytest.approx(0.5 + 2.0)
    assert roofline.roof_time({"link_bytes": 200, "messages": 4}, c) == pytest.approx(4 * 0.5 + 2.0)
    assert roofline.roof_time({"hbm_bytes": 1000}, c) == pytest.approx(1.0)     # no link, no latency
    assert roofline.roof_time({"link_bytes": 1, "hbm_bytes": 5000}, c) == pytest.approx(5.0)
    assert roofline.bound({"link_bytes": 8, "messages": 3}, c) == "latency"
    assert roofline.bound({"link_bytes": 800}, c) == "link"
    assert roofline.bound({"link_bytes": 1, "hbm_bytes": 5000}, c) == "hbm"
    assert roofline.roof_time({"link_bytes": 200}, {k: v for k, v in c.items() if k != "latency_s"}) == 2.0


def test_an_honest_latency_bound_kernel_reads_a_real_fraction_and_is_not_suspect():
    """A 4-byte flag exchange (grad_accum_loss_average-like): 4 bytes over 450 GB/s is 9 ps, so the
    bandwidth-only roofline read 0 %; with 1 us of latency per message a 3 us kernel reads 33 %, and
    a kernel at the latency floor itself (one message, 1.0 us) stays under the suspect line."""
    c = {"link_bw": 450e9, "hbm_bw": 4.8e12, "peak_flops": 989e12, "latency_s": 1e-6}
    cost = {"link_bytes": 4, "hbm_bytes": 8, "flops": 1}
    assert roofline.roof_time(cost, {**c, "latency_s": None}) < 1e-10          # what it read before
    for t_cand, expect in ((3e-6, 1 / 3), (1.0e-6, 1.0)):
        sizes = [{"cost": cost, "timing": {"reference": {"median_s": 20e-6}, "candidate": {"median_s": t_cand}}}]
        out = roofline.annotate(sizes, c)
        assert sizes[0]["roofline"]["candidate"] == pytest.approx(expect, rel=1e-3)
        assert sizes[0]["roof_bound"] == "latency" and out["suspect"] is False
    # below the floor (a cached answer, no message at all) it is flagged
    sizes = [{"cost": cost, "timing": {"reference": {"median_s": 20e-6}, "candidate": {"median_s": 0.5e-6}}}]
    assert roofline.annotate(sizes, c)["suspect"] is True
