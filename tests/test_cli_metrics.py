"""The formulas metrics.py gained for the `kernelbench` command: cumulative pass by refinement
round, USD per problem, the GM band of a run and the noise-aware speed change of a comparison."""
from __future__ import annotations

import pytest

from pytest_kernelbench import metrics


def _rounds(*outcomes):
    return {"outcome": "passed" if "passed" in outcomes else "failed", "problem": "p",
            "rounds": [{"round": n, "outcome": o} for n, o in enumerate(outcomes, 1)]}


def test_pass_by_round_counts_an_item_from_its_first_passing_round():
    items = [_rounds("passed"), _rounds("failed", "passed"), _rounds("failed", "failed", "passed"),
             _rounds("failed", "failed"), {"outcome": "passed", "problem": "q"},       # one round, no summary
             {"outcome": "skipped", "problem": "r"}]                                   # not counted
    assert metrics.pass_by_round(items) == pytest.approx([2 / 5, 3 / 5, 4 / 5])
    assert metrics.pass_by_round(items)[-1] == metrics.aggregate(items)["pass_rate"]
    assert metrics.pass_by_round([{"outcome": "skipped"}]) == []


def test_usd_per_problem_adds_samples_and_rounds_of_one_problem():
    items = [{"problem": "a", "outcome": "passed", "sample": 0, "cost": {"usd": 0.01}},
             {"problem": "a", "outcome": "failed", "sample": 1, "cost": {"usd": 0.03}},
             {"problem": "b", "outcome": "error", "cost": {"usd": 0.02}},
             {"problem": "c", "outcome": "skipped"}]
    assert metrics.usd_per_problem(items) == pytest.approx(0.06 / 2)
    assert metrics.usd_per_problem([{"problem": "a", "outcome": "passed"}]) is None   # no model: no price


def test_gm_band_is_the_gm_of_the_band_ends():
    assert metrics.gm_band([{"band": [1.0, 4.0]}, {"band": [4.0, 9.0]}]) == pytest.approx((2.0, 6.0))
    assert metrics.gm_band([{"band": [1.0, 4.0]}, {"band": None}]) is None


@pytest.mark.parametrize("base,bb,new,nb,change", [
    (1.20, (1.18, 1.22), 1.00, (0.98, 1.02), "regression"),     # -17 %, bands apart
    (1.20, (1.18, 1.22), 1.12, (1.00, 1.25), "noise"),          # -7 %, but the bands overlap
    (1.20, (1.18, 1.22), 1.16, (1.15, 1.17), "noise"),          # -3.3 %: under the threshold
    (1.00, (0.99, 1.01), 1.30, (1.28, 1.32), "improvement"),
    (1.20, None, 1.00, None, "regression"),                     # no bands (schema 1): the threshold decides
    (None, None, 1.00, (0.9, 1.1), None),                       # CPU: no speed to compare
])
def test_speed_change_needs_the_threshold_and_separate_bands(base, bb, new, nb, change):
    assert metrics.speed_change(base, bb, new, nb, 0.05) == change
