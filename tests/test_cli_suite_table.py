"""cli.suite_table: the suite table sorts by roofline and counts every size."""
from __future__ import annotations

def test_suite_table_sorts_by_roofline_and_counts_every_size():
    from pytest_kernelbench.cli import suite_table as mod
    doc = {"machine": {}, "items": [
        {"problem": p, "outcome": "passed", "roofline": {"reference": r},
         "sizes": [{"name": "s", "speedup": sp, "roofline": {"reference": r}, "roof_bound": "latency" if p == "b" else None}]}
        for p, r, sp in (("a", 0.5, 1.0), ("b", 0.01, 1.2), ("c", 0.2, 0.9))] +
        [{"problem": "d", "outcome": "failed", "roofline": {"reference": 0}, "sizes": []}]}
    lines = mod.table(doc)
    assert lines[0].startswith("3/4 passed")
    rows = [ln for ln in lines if ln.startswith("| ") and ln[2] in "abc"]
    assert [r[2] for r in rows] == ["b", "c", "a"]
    assert "| 1.0 % (latency) |" in rows[0] and "| 50.0 % |" in rows[2]
    assert lines[-1].startswith("| s | 3 | 0.900 | 1.200 | 1 | 1 |")
