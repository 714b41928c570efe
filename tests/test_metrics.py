"""metrics: geometric mean, item score, verdict tiers, pass@k and the run's aggregates."""
from __future__ import annotations

import math

import pytest

from pytest_kernelbench import metrics


def test_geomean_and_item_score_weigh_sizes_equally():
    assert metrics.geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert metrics.item_score([{"speedup": 4.0}, {"speedup": 1.0}]) == pytest.approx(2.0)
    assert metrics.geomean([]) is None


@pytest.mark.parametrize("score,tier", [(1.2, "better"), (1.19, "on_par"), (0.95, "on_par"), (0.94, "degraded"),
                                        (0.6, "degraded"), (0.59, "severely_degraded")])
def test_verdict_tiers(score, tier):
    assert metrics.verdict(score) == tier


def test_pass_at_k_unbiased_estimator():
    assert metrics.pass_at_k(3, 1, 1) == pytest.approx(1 / 3)
    assert metrics.pass_at_k(3, 1, 3) == 1.0
    assert metrics.pass_at_k(5, 0, 2) == 0.0
    assert metrics.pass_at_k(10, 3, 2) == pytest.approx(1 - math.comb(7, 2) / math.comb(10, 2))


def _item(problem, outcome, score=None, **kw):
    return {"problem": problem, "nodeid": problem, "outcome": outcome, "score": score,
            "verdict": metrics.verdict(score), "category": "collective", "parallelism": ["dp"],
            "difficulty": "easy", "libraries": ["nccl"], **kw}


def test_aggregates():
    items = [_item("a", "passed", 2.0), _item("b", "passed", 0.5), _item("c", "failed", failure="mismatch"),
             _item("d", "passed", 1.0), _item("e", "skipped")]
    a = metrics.aggregate(items)
    assert a["total"] == 4 and a["passed"] == 3 and a["skipped"] == 1
    assert a["pass_rate"] == 0.75
    assert a["gm_speedup"] == pytest.approx(1.0)
    assert a["pass_x_gm"] == pytest.approx(0.75)
    assert a["pass_good"] == pytest.approx(2 / 4)           # 2.0 better, 1.0 on_par
    assert a["fast_p"]["1.0"] == pytest.approx(1 / 4) and a["fast_p"]["0.0"] == pytest.approx(3 / 4)
    assert a["failures"] == {"mismatch": 1}
    b = metrics.breakdowns(items)
    assert b["category"]["collective"]["total"] == 4 and b["difficulty"]["easy"]["passed"] == 3


def test_samples_give_pass_at_k():
    items = [_item("a", "passed", 1.5, sample=0), _item("a", "failed", sample=1), _item("a", "failed", sample=2)]
    s = metrics.aggregate(items)["samples"]
    assert s["pass@1"] == pytest.approx(1 / 3) and s["pass@3"] == 1.0 and s["fast_1@3"] == 1.0
