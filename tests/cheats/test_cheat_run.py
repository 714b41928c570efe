"""Red team on CPU, the run itself: the honest control passes beside the cheats, every candidate
of every test_cheat_*.py file (and of every file's TREES) is reported, nothing is left running and the problem tree is unchanged."""
from __future__ import annotations

import json

import pytest
from cheatlib import item, tree_digest
from kbrun import leftover_processes

pytestmark = pytest.mark.e2e      # every test here reads the red team's inner run (tests/e2e_guard.py)


def test_honest_control_passes(judged):
    it = item(judged, "honest_p2p")
    assert it["outcome"] == "passed", it["message"]
    assert not it["warnings"]


def test_every_item_reported_and_nothing_left(judged):
    assert set(judged["items"]) == set(judged["candidates"])
    assert not leftover_processes(str(judged["root"]))


def test_problem_tree_unchanged(judged):
    assert tree_digest(judged["problems"]) == judged["before"]


def test_each_trees_knobs_were_set_for_its_items_alone(judged):
    """A Tree's environment (a dev knob such as KB_SPIN) is the worker's while its items run, so their
    jobs start with it (launch/env.py job_env); the other items get none."""
    seen = {p.stem.replace("__", "/"): json.loads(p.read_text()) for p in (judged["root"] / "knobs").glob("*.json")}
    assert seen == judged["knobs"]
