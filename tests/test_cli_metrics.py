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


# ---- kernelbench spread / overhead: the issue-16 tables ---------------------------------------------
def _selfcheck(problem, **speedups):
    return {"problem": problem, "outcome": "passed", "world_size": 2,
            "sizes": [{"name": n, "speedup": x, "band": [x - 0.01, x + 0.01]} for n, x in speedups.items()]}


def test_spread_counts_self_checks_within_the_size_target_and_names_the_rest(tmp_path):
    from pytest_kernelbench.cli import fidelity, main
    runs = [{"items": [_selfcheck("a", small=1.04, medium=1.02, large=0.99), _selfcheck("b", small=0.93, medium=1.05),
                       {"problem": "c", "outcome": "failed", "sizes": [{"name": "small", "speedup": 3.0}]}]},
            {"items": [_selfcheck("a", small=1.00, medium=0.96, large=1.031)]}]
    table = fidelity.spread(runs)
    assert (table["small"]["within"], table["small"]["n"]) == (2, 3)          # +-5 %: 1.04 and 1.00 in, 0.93 out
    assert (table["medium"]["within"], table["medium"]["n"]) == (1, 3)        # +-3 %: 1.05 and 0.96 out
    assert (table["large"]["within"], table["large"]["n"]) == (1, 2)          # 1.031 is outside +-3 %
    assert [(o["problem"], o["run"]) for o in table["medium"]["outside"]] == [("b", 0), ("a", 1)]
    assert table["small"]["min"] == 0.93 and table["small"]["max"] == 1.04    # the failed item is not counted
    assert table["large"]["band_holds_1"] == 1
    for i, doc in enumerate(runs):
        (tmp_path / f"r{i}.json").write_text(__import__("json").dumps({**doc, "schema_version": 2, "machine": {}}))
    lines = fidelity.spread_lines(table, 2)
    assert lines[3].startswith("| small | +-5% | 2/3 | 0.930-1.040 |") and "b#0: 0.930" in lines[3]
    assert main.main(["spread", str(tmp_path / "r0.json"), str(tmp_path / "r1.json"), "--md", str(tmp_path / "s.md")]) == 0
    assert "| medium | +-3% | 1/3 |" in (tmp_path / "s.md").read_text()


def test_overhead_table_ends_with_the_median_of_each_phase():
    from pytest_kernelbench.cli import overhead

    def item(p, wall, init, imp, sizes_s):
        return {"problem": p, "outcome": "passed", "world_size": 2, "wall_s": wall, "timed_s": 0.5,
                "overhead_s": wall - 0.5, "phases_s": {"init_s": init, "import_s": imp, "sizes_s": sizes_s},
                "sizes": [{"correctness_s": 0.2, "timing_s": sizes_s - 0.2}]}
    doc = {"items": [item("a", 3.0, 0.5, 0.1, 1.0), item("b", 5.0, 1.5, 0.1, 2.0), item("c", 4.0, 1.0, 0.3, 1.0)]}
    med = overhead.medians(doc)
    assert med["wall_s"] == 4.0 and med["setup_s"] == pytest.approx(1.3) and med["overhead_s"] == 3.5
    assert med["launch_s"] == pytest.approx(1.4)            # wall - setup - sizes: 1.4, 1.4, 1.7
    assert overhead.table(doc)[-1].startswith("| **median of 3** | | 4.00 |")
    assert overhead.medians({"items": []}) is None
    # timed rounds and the harness's own cost per round: what the rounds spent beyond their windows
    timing = {"reference": {"rounds_s": [1e-3, 1e-3], "iters": 10}, "candidate": {"rounds_s": [1e-3, 1e-3], "iters": 10},
              "spent_s": {"refill": 0.02, "checks": 0.01, "reference": 0.025, "candidate": 0.025}}
    doc["items"][0]["sizes"][0]["timing"] = timing       # 2 rounds: (0.02 + 0.01 + 0.05 - 0.04) s / 2
    r = overhead.rows(doc)[0]
    assert r[9] == 2 and r[10] == pytest.approx(20.0)
    assert overhead.table(doc)[2].endswith("| 2 | 20.0 |")


# ---- issue 24: unscored problems and families of variants ----------------------------------------
def _item(problem, outcome="passed", score=1.0, verdict="on_par", **extra):
    return {"problem": problem, "outcome": outcome, "score": score if outcome == "passed" else None,
            "verdict": verdict if outcome == "passed" else None, **extra}


def test_an_unscored_item_counts_in_the_pass_rate_and_in_no_speed_aggregate():
    items = [_item("a", score=2.0, verdict="better"), _item("b", outcome="failed"),
             _item("fifo", score=0.03, verdict="severely_degraded", unscored="host-polled")]
    agg = metrics.aggregate(items)
    assert (agg["total"], agg["passed"], agg["unscored"]) == (3, 2, 1)
    assert agg["pass_rate"] == pytest.approx(2 / 3)
    # speed over the two scored items: the 0.03x of the prescribed design does not drag the GM
    assert agg["gm_speedup"] == pytest.approx(2.0)
    assert agg["pass_x_gm"] == pytest.approx(0.5 * 2.0)
    assert agg["pass_good"] == 0.5 and agg["fast_1"] == 0.5 and agg["fast_p"]["0.0"] == 0.5
    assert metrics.aggregate([_item("fifo", unscored="x")])["gm_speedup"] is None   # nothing scored: no speed


def test_each_family_weighs_as_one_problem_in_the_family_weighted_figures():
    # four all-reduce variants at 1.0x that all pass, and one lone problem that fails
    items = [_item(f"ar{i}", family="allreduce") for i in range(4)] + [_item("lone", outcome="failed")]
    agg = metrics.aggregate(items)
    assert agg["pass_rate"] == pytest.approx(4 / 5)                 # every item weighs one
    fam = agg["family_weighted"]
    assert fam["families"] == 2 and fam["pass_rate"] == pytest.approx(1 / 2)    # every family weighs one
    assert fam["gm_speedup"] == pytest.approx(1.0) and fam["pass_x_gm"] == pytest.approx(0.5)
    # the scores inside a family share its weight: GM over families of the family's own GM
    items = [_item("a1", score=4.0, family="a"), _item("a2", score=1.0, family="a"), _item("b", score=1.0)]
    assert metrics.aggregate(items)["family_weighted"]["gm_speedup"] == pytest.approx(2.0 ** 0.5)
    assert metrics.breakdowns(items)["family"] == {"a": {"total": 2, "passed": 2, "pass_rate": 1.0,
                                                         "gm_speedup": 2.0, "pass_x_gm": 2.0, "pass_good": 1.0,
                                                         "fast_1": 0.5}}
