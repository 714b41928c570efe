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


def _item(problem: str, outcome: str, message: str = "", failure: str | None = None) -> dict:
    return {"problem": problem, "nodeid": problem, "outcome": outcome, "message": message, "failure": failure}


def test_solutions_only_table_lists_the_items_that_ran_and_one_line_for_the_rest():
    """Issue 45 (7): two kernels under --kb-solutions-only printed 82 rows, 80 of them skipped."""
    from pytest_kernelbench import report
    from pytest_kernelbench.protocol import SOLUTIONS_ONLY_SKIP
    items = [_item("pkb/1_allreduce", "passed"), _item("pkb/2_allgather", "failed", "values differ", "wrong_answer"),
             *[_item(f"pkb/{n}_x", "skipped", SOLUTIONS_ONLY_SKIP) for n in range(3, 83)],
             _item("pkb/90_y", "skipped", "needs 4 CUDA GPUs")]
    lines = report.table(items)
    assert [ln.split()[0] for ln in lines[1:-1]] == ["pkb/1_allreduce", "pkb/2_allgather", "pkb/90_y"]
    assert lines[-1] == "(and 80 problem(s) without a file in --kb-solutions, skipped: --kb-solutions-only)"


def test_the_skip_line_is_short_and_errors_are_singular_for_one():
    """Issue 45 (7): a 1,000-character skip line; "1 errors"."""
    from pytest_kernelbench import metrics, report
    items = [_item("a", "passed"), _item("b", "error", "x", "harness_error"),
             *[_item(f"s{n}", "skipped", f"NCCL-only shapes {n}: " + "gloo refuses the reference's shapes " * 8)
               for n in range(12)]]
    doc = {"items": items, "aggregates": metrics.aggregate(items), "breakdowns": {}, "config": {}}
    lines = report.summary_lines(doc)
    assert "(1/1; 0 failed, 1 error (retryable), 12 skipped, not counted)" in lines[0]
    skipped = next(ln for ln in lines if ln.startswith("skipped: "))
    assert len(skipped) < 500 and skipped.endswith("8 x 8 other reason(s), in the report"), skipped
