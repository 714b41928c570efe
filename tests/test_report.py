"""report: the terminal table."""
from __future__ import annotations

from pytest_kernelbench.metrics import roofline


def test_terminal_table_shows_roofline_and_suspect_flag():
    from pytest_kernelbench import report
    sizes = [{"name": "large", "speedup": 3.0, "cost": {"link_bytes": 100},
              "timing": {"reference": {"median_s": 2.0}, "candidate": {"median_s": 0.5}}}]
    item = {"problem": "collective/all_reduce", "nodeid": "x", "outcome": "passed", "world_size": 4, "device": "cuda",
            "candidate": {"label": "shipped:symm_mem"}, "sizes": sizes, "score": 3.0, "verdict": "better", "wall_s": 9.0}
    item.update(roofline.annotate(sizes, {"link_bw": 100.0}))
    lines = report.table([item])
    assert "passed (suspect)" in lines[1] and "200%" in lines[1] and "3.00x" in lines[1]
