"""rank.timing: the rounds' summary, paired rounds that give an exact copy no edge, adaptive rounds
(protocol.TimingSpec)."""
from __future__ import annotations

import pytest

from pytest_kernelbench import metrics
from pytest_kernelbench.protocol import TimingSpec
from pytest_kernelbench.rank.timing import Timing, set_count, summarize


def test_timing_summary_is_median_min_max_of_the_rounds():
    s = summarize([2.0, 5.0, 3.5])
    assert s["rounds_s"] == [2.0, 5.0, 3.5] and s["median_s"] == 3.5 and s["min_s"] == 2.0


class _VirtualClocks:
    """Virtual time: a call costs what the test says, nothing else does."""

    def __init__(self):
        self.now = 0.0

    def side(self, impl):
        """A window of `calls` calls, as the checker times one: seconds per call."""
        def window(calls, key):
            t0 = self.now
            for _ in range(calls):
                impl(None)
            return (self.now - t0) / calls
        return window


def _self_check(first_of_pair_penalty, unseen_data_penalty, rounds):
    """An exact copy timed against itself, where a call costs more when it opens a pair of rounds
    or when its data is new: both sides must come out equal."""
    clocks = _VirtualClocks()
    state = {"key": None, "seen": set(), "round": 0}

    def refill(key, calls):
        state["key"] = key
        state["round"] += 1

    def impl(x):
        cost = 1.0
        if state["round"] % 2 == 1:                       # the first round of a pair (time order)
            cost += first_of_pair_penalty
        if state["key"] not in state["seen"]:
            cost += unseen_data_penalty
            state["seen"].add(state["key"])
        clocks.now += cost

    t = Timing(lambda v: v, lambda msg: None, TimingSpec(rounds=rounds, warmup=1, round_s=1.0, max_iters=1))
    measured = t.run("size x", {"reference": clocks.side(impl), "candidate": clocks.side(impl)}, refill, lambda n: 1)
    times = measured["times"]
    ratio = summarize(times["reference"])["median_s"] / summarize(times["candidate"])["median_s"]
    return times, ratio


@pytest.mark.parametrize("rounds", [5, 15, 16])
def test_timing_gives_an_exact_copy_no_edge_from_round_order(rounds):
    # an odd round count let one side go first once more: with a slow first-of-pair round its
    # median was the slow mode and the other's the fast one (1.20x for a copy on 4xH200)
    times, ratio = _self_check(first_of_pair_penalty=0.5, unseen_data_penalty=0.0, rounds=rounds)
    n = len(times["reference"])
    assert n % 2 == 0 and n >= rounds
    assert ratio == pytest.approx(1.0)


def test_timing_gives_an_exact_copy_no_edge_from_shared_round_data():
    # when both rounds of a pair saw the same values, whoever went second found them warm: the
    # rounds split into two modes and the median fell between them, wherever the noise put it
    times, ratio = _self_check(first_of_pair_penalty=0.0, unseen_data_penalty=0.7, rounds=16)
    assert ratio == pytest.approx(1.0)
    for name in ("reference", "candidate"):
        assert max(times[name]) == pytest.approx(min(times[name])), times[name]


def _noisy_self_check(jitter, rounds, max_rounds, seed=1):
    """An exact copy against itself whose every call costs 1 +- jitter (virtual time)."""
    import random
    rng = random.Random(seed)
    clocks = _VirtualClocks()

    def impl(x):
        clocks.now += 1.0 + rng.uniform(-jitter, jitter)

    spec = TimingSpec(rounds=rounds, warmup=1, round_s=1.0, max_iters=1, band_target=0.03, max_rounds=max_rounds)
    t = Timing(lambda v: v, lambda msg: None, spec)
    measured = t.run("size x", {"reference": clocks.side(impl), "candidate": clocks.side(impl)}, lambda key, calls: None,
                     lambda n: 1)
    timing = {name: summarize(measured["times"][name]) for name in ("reference", "candidate")}
    return measured, metrics.size_band(timing)


def test_quiet_timing_stops_at_the_base_rounds():
    measured, band = _noisy_self_check(jitter=0.001, rounds=16, max_rounds=64)
    assert len(measured["times"]["reference"]) == 16 and measured["band_target"] == 0.03
    assert 0.97 <= band[0] <= 1.0 <= band[1] <= 1.03


def test_noisy_timing_runs_more_rounds_until_the_band_is_inside_the_target():
    base, base_band = _noisy_self_check(jitter=0.05, rounds=16, max_rounds=16)
    more, band = _noisy_self_check(jitter=0.05, rounds=16, max_rounds=200)
    n = len(more["times"]["reference"])
    assert base_band[1] / base_band[0] > 1.06          # 16 rounds leave a band wider than +-3 %
    assert 16 < n < 200 and n % 2 == 0 and len(more["times"]["candidate"]) == n
    assert band[0] >= 0.97 and band[1] <= 1.03, band


def test_timing_that_never_settles_stops_at_max_rounds_and_keeps_its_band():
    measured, band = _noisy_self_check(jitter=0.6, rounds=16, max_rounds=24)
    assert len(measured["times"]["reference"]) == 24
    assert band[1] / band[0] > 1.06                     # reported as it is: the verdict reads it


def test_a_user_round_count_is_exact_on_gpus_too():
    spec = TimingSpec.for_device("cuda", rounds=10)
    assert (spec.rounds, spec.max_rounds) == (10, 0)
    assert TimingSpec.for_device("cuda").max_rounds > TimingSpec.for_device("cuda").rounds
    assert TimingSpec.for_device("cpu").max_rounds == 0


def test_no_window_holds_more_calls_than_the_memory_cap():
    # the warm-up and the probe windows held 24 calls whatever the cap: with two processes holding a
    # window's outputs, a 1.1 GiB-per-call problem ran an H100 out of memory (zero1_adam_step, large)
    clocks, seen = _VirtualClocks(), []

    def impl(x):
        clocks.now += 1.0

    def side(calls, key):
        seen.append(calls)
        return clocks.side(impl)(calls, key)

    spec = TimingSpec(rounds=6, warmup=5, round_s=100.0, max_iters=5000)
    Timing(lambda v: v, lambda msg: None, spec).run("size x", {"reference": side, "candidate": side},
                                                    lambda key, calls: None, lambda name: 3)
    assert max(seen) == 3 and min(seen) >= 1, seen


def test_every_call_of_a_window_has_fresh_values_in_a_set_of_its_own():
    # a set met twice in a window can be answered by replaying the first answer (a cache keyed on the
    # pointer, forgotten between windows): so a window holds no more calls than there are sets, and
    # each window's sets are refilled first, as many of them as it calls
    clocks, log = _VirtualClocks(), []

    def impl(x):
        clocks.now += 1e-6

    def side(calls, key):
        log.append(("window", calls))
        return clocks.side(impl)(calls, key)

    spec = TimingSpec(rounds=6, warmup=5, round_s=1.0, max_iters=5000, max_sets=12)
    n_sets = set_count(1 << 20, 50 << 20, spec)
    assert n_sets == 12
    Timing(lambda v: v, lambda msg: None, spec).run("size x", {"reference": side, "candidate": side},
                                                    lambda key, calls: log.append(("refill", calls)),
                                                    lambda name: n_sets)
    windows = [n for what, n in log if what == "window"]
    assert max(windows) == n_sets, windows        # 1 s of 1 us calls would have been a million
    refilled = 0
    for what, n in log:          # every window after a refill that covers it (warm-up and probes: one refill)
        if what == "refill":
            refilled = n
        else:
            assert n <= refilled, log


def test_set_count_is_the_set_budget_not_the_cache_span():
    spec = TimingSpec()
    assert set_count(1 << 20, 50 << 20, spec) == 64                       # small sets: max_sets
    assert set_count(512 << 20, 50 << 20, spec) == 16                     # 8 GiB of 512 MiB sets
    assert set_count(16 << 30, 50 << 20, spec) == 2                       # never fewer than two
    assert TimingSpec.for_device("cpu").max_sets == 8                     # CPU runs check the logic only
