"""rank.timing: the rounds' summary, paired rounds that give an exact copy no edge, adaptive rounds
(protocol.TimingSpec)."""
from __future__ import annotations

import pytest
import torch

from pytest_kernelbench import metrics
from pytest_kernelbench.protocol import TimingSpec
from pytest_kernelbench.rank.timing import LONE_PAIRS, Timing, summarize


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


def _self_check(first_of_pair_penalty, unseen_data_penalty, rounds, flush=True):
    """An exact copy timed against itself, where a call costs more when it opens a pair of rounds
    or when its data is not in the cache (emptied before each window unless `flush` is False):
    both sides must come out equal."""
    clocks = _VirtualClocks()
    state = {"key": None, "seen": set(), "round": 0}

    def refill(key, calls, first):
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
    before = (lambda name: state["seen"].clear()) if flush else None
    measured = t.run("size x", {"reference": clocks.side(impl), "candidate": clocks.side(impl)}, refill, lambda n: 1,
                     before=before)
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
    # both windows of a round run on the same values (back to back: the pause between them is where
    # jitter gets in), so whoever went second would find them warm: the rounds would split into two
    # modes and the paired median fall between them, wherever the noise put it. The cache is emptied
    # before every window (before(): rank/slots.py)
    times, ratio = _self_check(first_of_pair_penalty=0.0, unseen_data_penalty=0.7, rounds=16)
    assert ratio == pytest.approx(1.0)
    for name in ("reference", "candidate"):
        assert max(times[name]) == pytest.approx(min(times[name])), times[name]
    split, _ = _self_check(first_of_pair_penalty=0.0, unseen_data_penalty=0.7, rounds=16, flush=False)
    assert max(split["reference"]) > min(split["reference"]) + 0.5      # what the emptying prevents


def _noisy_self_check(jitter, rounds, max_rounds, seed=1):
    """An exact copy against itself whose every call costs 1 +- jitter (virtual time)."""
    import random
    rng = random.Random(seed)
    clocks = _VirtualClocks()

    def impl(x):
        clocks.now += 1.0 + rng.uniform(-jitter, jitter)

    spec = TimingSpec(rounds=rounds, warmup=1, round_s=1.0, max_iters=1, band_target=0.03, max_rounds=max_rounds)
    t = Timing(lambda v: v, lambda msg: None, spec)
    measured = t.run("size x", {"reference": clocks.side(impl), "candidate": clocks.side(impl)}, lambda key, calls, first: None,
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


def test_gpu_defaults_start_from_the_least_rounds_and_a_quiet_size_stops_there(monkeypatch):
    spec = TimingSpec.for_device("cuda")
    assert spec.rounds == 12 and spec.max_rounds == 64 and spec.round_s == 0.010
    measured, band = _noisy_self_check(jitter=0.001, rounds=spec.rounds, max_rounds=spec.max_rounds)
    assert len(measured["times"]["reference"]) == 12 and 0.97 <= band[0] <= 1.0 <= band[1] <= 1.03
    # the dev knob moves the least rounds of adaptive timing only; a count the user asked for is exact
    monkeypatch.setenv("KB_DEV_MIN_ROUNDS", "20")
    assert Timing(lambda v: v, lambda msg: None, spec).rounds == 20
    assert Timing(lambda v: v, lambda msg: None, TimingSpec.for_device("cuda", rounds=8)).rounds == 8


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
                                                    lambda key, calls, first: None, lambda name: 3)
    assert max(seen) == 3 and min(seen) >= 1, seen


def test_a_round_refills_once_and_runs_its_two_windows_back_to_back():
    # the pause between a round's windows is where a VM's wall-clock jitter gets in: nothing of the
    # checker's (fresh values, the candidate's checks) runs between them, and each round's windows
    # are no longer than the round's refill covers and prepare() was told
    clocks, log = _VirtualClocks(), []

    def impl(x):
        clocks.now += 1e-3

    def side(name):
        def run(calls, key):
            log.append((name, calls))
            return clocks.side(impl)(calls, key)
        return run

    spec = TimingSpec(rounds=6, warmup=5, round_s=0.05, max_iters=5000)
    Timing(lambda v: v, lambda msg: None, spec).run(
        "size x", {"reference": side("reference"), "candidate": side("candidate")},
        lambda key, calls, first: log.append(("refill", calls, first)), lambda name: 1000,
        lambda: log.append(("checks", 0)), lambda calls: log.append(("prepare", calls)),
        lambda name: log.append(("before", name)))
    start = log.index(("prepare", 50))
    rounds = log[start + 1:]
    # the first LONE_PAIRS rounds are followed by a round of one-call windows, alike in form
    assert len(rounds) == 6 * (6 + LONE_PAIRS), rounds
    at, firsts = 0, []
    for r in range(6):
        for calls in (50, 1) if r < LONE_PAIRS else (50,):
            refill, before1, first, before2, second, checks = rounds[at:at + 6]
            at += 6
            assert refill == ("refill", calls, first[0]) and checks == ("checks", 0), rounds
            assert {first[0], second[0]} == {"reference", "candidate"} and first[1] == second[1] == calls
            assert before1 == ("before", first[0]) and before2 == ("before", second[0])
            firsts.append(first[0])
        assert r >= LONE_PAIRS or firsts[-1] == firsts[-2]      # a lone round keeps its round's order
    assert firsts[:2 * LONE_PAIRS:2] + firsts[2 * LONE_PAIRS:] == ["reference", "candidate"] * 3
    log = [e for e in log if e[0] != "before"]
    start = log.index(("prepare", 50))
    for name, alone in (("reference", 3), ("candidate", 1)):   # warm-up (and the reference's probes):
        mine = [i for i, e in enumerate(log[:start]) if e[0] == name]           # each refilled first, checked after
        assert len(mine) == alone and all(log[i - 1] == ("refill", log[i][1], None) for i in mine), log[:start]
        assert all(log[i + 1] == ("checks", 0) for i in mine), log[:start]


def _sized(candidate_cost, spec):
    """The calls a window holds, and the rounds run, where a reference call costs 1 ms (virtual time)
    and a candidate call what candidate_cost(its call number) says."""
    clocks, calls, held = _VirtualClocks(), {"n": 0}, []

    def reference(x):
        clocks.now += 1e-3

    def candidate(x):
        calls["n"] += 1
        clocks.now += candidate_cost(calls["n"])

    def side(impl):
        def run(n, key):
            held.append(n)
            return clocks.side(impl)(n, key)
        return run

    measured = Timing(lambda v: v, lambda msg: None, spec).run(
        "size x", {"reference": side(reference), "candidate": side(candidate)}, lambda key, n, first: None,
        lambda name: 5000)
    return measured["iters"], len(measured["times"]["reference"])


def test_the_reference_alone_sets_the_calls_a_window_holds():
    # a candidate slow only in a size's first windows (its warm-up and any probes: it can tell them
    # apart by their place and their 4 and 24 calls) made every window hold 1 call when its own
    # probes counted, so the windows' fixed part outweighed the calls and a 2x slower candidate read
    # near 1; the windows now hold what 50 ms of the reference's calls take, whatever it does
    spec = TimingSpec(rounds=6, warmup=5, round_s=0.05, max_iters=5000)
    honest, _ = _sized(lambda k: 2e-3, spec)
    sandbagged, _ = _sized(lambda k: 1.0 if k <= 33 else 2e-3, spec)
    assert honest == sandbagged == {"reference": 50, "candidate": 50}


def test_adaptive_rounds_stop_at_the_budget_for_a_candidate_far_slower():
    # windows sized by the reference hold as many calls for a candidate 1000x slower: 50 s a window;
    # past the budget (16 x 128 windows of 50 ms, 102.4 s) no more rounds run, not even the least:
    # the pair that passed it is the last (4 rounds, 200 s, where the least 6 took 300 s and a
    # noisy band would have asked for 64; on a GPU 1000x slower met the item's deadline)
    import random
    rng = random.Random(3)
    spec = TimingSpec(rounds=6, warmup=1, round_s=0.05, max_iters=5000, band_target=0.03, max_rounds=64)
    iters, rounds = _sized(lambda k: 1.0 * rng.uniform(0.5, 1.5), spec)
    assert iters["candidate"] == 50 and rounds in (2, 4)
    iters, rounds = _sized(lambda k: 1.0, spec)
    assert rounds == 4             # 100.1 s after the first pair, within the budget; 200.2 s after the second
    # a count the user asked for (and CPU timing: max_rounds 0) runs exactly, however slow
    exact = TimingSpec(rounds=6, warmup=1, round_s=0.05, max_iters=5000, band_target=0.03, max_rounds=0)
    assert _sized(lambda k: 1.0, exact)[1] == 6
    # a window of 50 calls 0.7-1.3x the reference's (a band far wider than +-3 % after 6 rounds)
    iters, rounds = _sized(lambda k: 1e-3 * random.Random(k // 50).uniform(0.7, 1.3) if k > 1 else 1e-3, spec)
    assert rounds > 6              # noise at a cost within the budget: rounds go on


class _Died(Exception):
    pass


def _checked_window_run(monkeypatch, reads: list, ref_s: float):
    """A timed window's check on stubs: what the checker read of the outputs at each read, and a
    reference that takes `ref_s` a call; returns the run and the order of events."""
    from types import SimpleNamespace

    from pytest_kernelbench.rank import sizes, timed
    events: list = []
    run = sizes.SizeRun.__new__(sizes.SizeRun)
    run.cuda, run.size, run.pending, run.verdict_now = True, "small", None, None
    run.job = SimpleNamespace(inplace=False, tolerance={"atol": 0, "rtol": 0})

    def call_reference(args, phase, beat=True):
        events.append("reference")
        import time
        end = time.perf_counter() + ref_s      # busy: time.sleep is the stub below
        while time.perf_counter() < end:
            pass
        return args[0] * 2

    def die(category, message, where, exc=None):
        raise _Died(category, message)
    run.c = SimpleNamespace(key="k", call_reference=call_reference, harness=None, die=die)

    def read(window, indices):
        events.append("read")
        return {i: reads.pop(0) for i in indices}
    run.link = SimpleNamespace(read=read)
    run.inspect = lambda window, idx, phase, first, settle=True: (events.append(f"inspect settle={settle}"),
                                                                read(window, idx))[1]
    monkeypatch.setattr(timed, "SETTLED_EVERY", 1)       # this window is the one let settle
    sleeps: list = []
    monkeypatch.setattr(sizes.time, "sleep", lambda s: (sleeps.append(s), events.append("sleep")))
    window = SimpleNamespace(calls=1, seconds=0.02)
    x = torch.ones(4)
    return run, window, x, events, sleeps, timed


def test_a_timed_window_let_settle_is_read_again_after_the_checkers_next_work_and_late_work_fails(monkeypatch):
    import time
    good = torch.full((4,), 2.0)
    # the check compares what was read at "done" and asks for the settle; it reads nothing again itself
    run, window, x, events, sleeps, timed = _checked_window_run(monkeypatch, [good.clone()] * 3, 0.0)
    assert timed.check_window(run, window, timed.picked(run, "r1", window.calls), [(x,)], [(x,)], "size small") is True
    assert events == ["inspect settle=False", "read", "reference"] and run.pending is None
    # read again after the checker's next work (the next round's refill): it counts half of the
    # settle (0.25 x 20 ms), so twice the settle since the first read needs no sleep
    run.settled(window, [0], {0: good}, "size small, timing", since=time.perf_counter() - 0.012)
    assert events[-1] == "read" and not sleeps
    # soon after the first read: only what remains of the settle is slept
    run.settled(window, [0], {0: good}, "size small, timing", since=time.perf_counter())
    assert events[-2:] == ["sleep", "read"] and 0 < sleeps[0] <= 0.005
    # work deferred past "done" changed the output between the two reads: the item fails
    run, window, x, events, sleeps, timed = _checked_window_run(monkeypatch, [good.clone(), good + 1], 0.0)
    assert timed.check_window(run, window, timed.picked(run, "r1", window.calls), [(x,)], [(x,)], "size small")
    with pytest.raises(_Died) as died:
        run.settled(window, [0], {0: good}, "size small, timing", since=time.perf_counter() - 0.012)
    assert died.value.args[0] == "runtime_error" and "changed after solution() returned" in died.value.args[1]


@pytest.mark.parametrize("ref_s, cand_s, lone_ref, lone_cand, capped", [
    (1e-3, 1e-3, [3e-3, 3.1e-3], [3.05e-3, 3e-3], False),      # the reference against itself
    (1e-3, 0.98e-3, [3e-3, 3e-3], [3.05e-3, 2.98e-3], False),  # ... its lone calls slower by chance
    (1e-3, 0.5e-3, [3e-3, 3e-3], [2.5e-3, 2.6e-3], False),     # truly twice as fast: its lone calls are too
    (1e-3, 0.3e-3, [3e-3, 3e-3], [3e-3, 3.02e-3], True),       # fast only where it sees a window's calls
    (1e-3, 0.3e-3, [3e-3, 3e-3], [1e-3, 1e-3], False),         # the noise at this size hides any bound
])
def test_the_lookahead_bound_caps_only_a_gain_the_lone_calls_do_not_show(ref_s, cand_s, lone_ref, lone_cand, capped):
    from pytest_kernelbench.rank.stats import lookahead_bound
    timing = {"reference": {"median_s": ref_s}, "candidate": {"median_s": cand_s},
              "lone": {"reference": lone_ref, "candidate": lone_cand}}
    bound = lookahead_bound(timing, 0.03)
    assert bound["capped"] == capped, bound
    if capped:      # credited with its lone call's time: the reference's, less the noise and the band target
        assert bound["bound_s"] == pytest.approx(0.97 * (1e-3 - 0.02e-3))
    assert lookahead_bound({**timing, "lone": {"reference": [], "candidate": []}}, 0.03) is None
