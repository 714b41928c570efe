"""The roofline across nodes (issue 26.4): a cost() may give the bytes that cross the NIC apart
(`inter_node_bytes`), the machine's inter-node bandwidth comes from a multi-node calibration or
the published NIC figure, and the old one-node cost() dicts read as before. Pure arithmetic."""
from __future__ import annotations

import pytest

from pytest_kernelbench.metrics import calibrate, roofline
from pytest_kernelbench.spec import hardware

H100 = {"link_bw": 450e9, "inter_node_bw": 50e9, "hbm_bw": 3.35e12, "peak_flops": 989e12, "latency_s": 1e-6}


def test_a_one_node_cost_reads_as_before():
    cost = {"link_bytes": 450e6, "hbm_bytes": 1e6, "flops": 0}
    t, bound = roofline.roof(cost, H100)
    assert t == pytest.approx(1e-6 + 1e-3) and bound == "link"
    # the same machine without an inter-node figure: the same roof
    assert roofline.roof(cost, {k: v for k, v in H100.items() if k != "inter_node_bw"}) == (t, bound)


def test_inter_node_bytes_go_over_the_nic_not_nvlink():
    # 50 MB over the NIC at 50 GB/s is 1 ms; had it been charged to NVLink it would read 0.11 ms
    cost = {"link_bytes": 45e6, "inter_node_bytes": 50e6, "hbm_bytes": 1e6}
    t, bound = roofline.roof(cost, H100)
    assert bound == "inter_node" and t == pytest.approx(1e-6 + 1e-3)
    terms = roofline.roof_terms(cost, H100)
    assert terms["link"] == pytest.approx(1e-4) and terms["inter_node"] == pytest.approx(1e-3)


def test_the_two_links_overlap_the_larger_bounds():
    """NVLink and the NIC are separate engines: a pipelined hierarchical algorithm keeps both busy,
    so the bound is the larger of the two, not their sum."""
    cost = {"link_bytes": 900e6, "inter_node_bytes": 50e6}       # 2 ms on NVLink, 1 ms on the NIC
    t, bound = roofline.roof(cost, H100)
    assert bound == "link" and t == pytest.approx(1e-6 + 2e-3)


def test_only_inter_node_bytes_still_count_one_message():
    cost = {"inter_node_bytes": 8.0}
    assert roofline.messages(cost) == 1.0
    t, bound = roofline.roof(cost, H100)
    assert bound == "latency" and t == pytest.approx(1e-6 + 8.0 / 50e9)


def test_inter_node_bytes_without_a_ceiling_are_not_charged_to_nvlink():
    """A record of an older run (no inter_node_bw in its ceilings) reads the rest of its cost."""
    ceilings = {"link_bw": 450e9, "hbm_bw": 3.35e12}
    cost = {"link_bytes": 450e6, "inter_node_bytes": 5e9, "hbm_bytes": 0}
    assert roofline.roof(cost, ceilings) == (pytest.approx(1e-3), "link")


def test_annotate_flags_a_candidate_faster_than_the_nic_allows():
    sizes = [{"cost": {"link_bytes": 0, "inter_node_bytes": 50e6},     # 1 ms over the NIC
              "timing": {"reference": {"median_s": 2e-3}, "candidate": {"median_s": 0.5e-3}}}]
    out = roofline.annotate(sizes, H100)
    assert sizes[0]["roof_bound"] == "inter_node" and out["suspect"] is True
    assert sizes[0]["roofline"]["reference"] == pytest.approx((1e-3 + 1e-6) / 2e-3)


def test_published_nic_figure_is_the_fallback_and_says_so():
    pub = hardware.published_ceilings("NVIDIA H100 80GB HBM3")
    assert pub["inter_node_bw"] == 50e9 and "400 Gb/s" in pub["inter_node_source"]
    assert hardware.inter_node_ceiling("NVIDIA A100-SXM4-80GB") == (25e9, "published NIC: 200 Gb/s per GPU")
    c = calibrate.ceilings({"gpu_model": "NVIDIA H100 80GB HBM3"}, {"link_bw": 400e9})
    assert c["inter_node_bw"] == 50e9
    assert "inter_node_bw published NIC: 400 Gb/s per GPU" in c["source"], c["source"]


def test_a_measured_inter_node_bandwidth_wins_and_says_so():
    """What the cluster measured is what its NICs give (fewer NICs per GPU than the reference
    system's is common): it replaces the published figure, lower or higher."""
    c = calibrate.ceilings({"gpu_model": "NVIDIA H200"}, {"inter_node_bw": 23e9})
    assert c["inter_node_bw"] == 23e9 and "inter_node_bw measured" in c["source"], c["source"]


def test_a_cpu_machine_has_no_inter_node_ceiling():
    assert calibrate.ceilings({"gpu_model": None}, {}).get("inter_node_bw") is None
    assert roofline.roof({"inter_node_bytes": 1e6}, {}) == (None, None)
