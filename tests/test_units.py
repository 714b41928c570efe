"""Pure logic: metrics, roofline, comparison, GPU lease pool, problem validation, launch helpers."""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
from pathlib import Path

import pytest
import torch
from kbrun import PROBLEMS, make_tree

from pytest_kernelbench import launch, metrics, outcome, procs
from pytest_kernelbench.launch.gpus import GpuPool
from pytest_kernelbench.metrics import roofline
from pytest_kernelbench.protocol import TimingSpec
from pytest_kernelbench.rank import compare
from pytest_kernelbench.rank.timing import Timing, summarize
from pytest_kernelbench.spec.problem import ProblemError, load_problem


# ---- metrics -------------------------------------------------------------------------------
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


# ---- roofline ------------------------------------------------------------------------------
def test_roofline_takes_the_largest_term_and_flags_suspect_speed():
    ceilings = {"link_bw": 100.0, "hbm_bw": 1000.0, "peak_flops": 1e6}
    assert roofline.roof_time({"link_bytes": 200, "hbm_bytes": 1000, "flops": 10}, ceilings) == 2.0
    assert roofline.roof_time({"flops": 1}, {}) is None
    sizes = [{"cost": {"link_bytes": 100}, "timing": {"reference": {"median_s": 2.0}, "candidate": {"median_s": 0.5}}}]
    out = roofline.annotate(sizes, ceilings)
    assert sizes[0]["roofline"] == {"reference": 0.5, "candidate": 2.0}
    assert out["suspect"] is True and sizes[0]["suspect"] is True
    ok = [{"cost": {"link_bytes": 100}, "timing": {"reference": {"median_s": 2.0}, "candidate": {"median_s": 1.0}}}]
    assert roofline.annotate(ok, ceilings)["suspect"] is False


def test_roofline_latency_term_adds_to_link_time_per_dependent_message():
    c = {"link_bw": 100.0, "hbm_bw": 1000.0, "peak_flops": 1e6, "latency_s": 0.5}
    # one message wherever bytes cross a link, unless cost() says how many dependent steps
    assert roofline.roof_time({"link_bytes": 200}, c) == pytest.approx(0.5 + 2.0)
    assert roofline.roof_time({"link_bytes": 200, "messages": 4}, c) == pytest.approx(4 * 0.5 + 2.0)
    assert roofline.roof_time({"hbm_bytes": 1000}, c) == pytest.approx(1.0)     # no link, no latency
    assert roofline.roof_time({"link_bytes": 1, "hbm_bytes": 5000}, c) == pytest.approx(5.0)
    assert roofline.bound({"link_bytes": 8, "messages": 3}, c) == "latency"
    assert roofline.bound({"link_bytes": 800}, c) == "link"
    assert roofline.bound({"link_bytes": 1, "hbm_bytes": 5000}, c) == "hbm"
    assert roofline.roof_time({"link_bytes": 200}, {k: v for k, v in c.items() if k != "latency_s"}) == 2.0


def test_an_honest_latency_bound_kernel_reads_a_real_fraction_and_is_not_suspect():
    """A 4-byte flag exchange (grad_accum_loss_average-like): 4 bytes over 450 GB/s is 9 ps, so the
    bandwidth-only roofline read 0 %; with 1 us of latency per message a 3 us kernel reads 33 %, and
    a kernel at the latency floor itself (one message, 1.0 us) stays under the suspect line."""
    c = {"link_bw": 450e9, "hbm_bw": 4.8e12, "peak_flops": 989e12, "latency_s": 1e-6}
    cost = {"link_bytes": 4, "hbm_bytes": 8, "flops": 1}
    assert roofline.roof_time(cost, {**c, "latency_s": None}) < 1e-10          # what it read before
    for t_cand, expect in ((3e-6, 1 / 3), (1.0e-6, 1.0)):
        sizes = [{"cost": cost, "timing": {"reference": {"median_s": 20e-6}, "candidate": {"median_s": t_cand}}}]
        out = roofline.annotate(sizes, c)
        assert sizes[0]["roofline"]["candidate"] == pytest.approx(expect, rel=1e-3)
        assert sizes[0]["roof_bound"] == "latency" and out["suspect"] is False
    # below the floor (a cached answer, no message at all) it is flagged
    sizes = [{"cost": cost, "timing": {"reference": {"median_s": 20e-6}, "candidate": {"median_s": 0.5e-6}}}]
    assert roofline.annotate(sizes, c)["suspect"] is True


# ---- comparison ----------------------------------------------------------------------------
def test_compare_names_position_and_error():
    exp = torch.zeros(4, 3)
    out = exp.clone()
    out[2, 1] = 0.5
    msg, err = compare.values(out, exp, {"atol": 1e-3, "rtol": 0})
    assert "first at [2, 1]" in msg and err == pytest.approx(0.5)
    assert compare.values(exp.clone(), exp, {"atol": 0, "rtol": 0})[0] is None


def test_compare_structure_type_shape_dtype_nan():
    e = torch.ones(3)
    assert "expected shape" in compare.structure(torch.ones(4), e)
    assert "dtype" in compare.structure(torch.ones(3, dtype=torch.float64), e)
    assert "expected 2 items" in compare.structure((e,), (e, e))

    class Lazy(torch.Tensor):
        pass
    assert "expected a torch.Tensor" in compare.structure(torch.ones(3).as_subclass(Lazy), e)
    nan = torch.ones(3)
    nan[1] = float("nan")
    assert "NaN/Inf" in compare.values(nan, e, {"atol": 1, "rtol": 1})[0]
    assert compare.values(torch.tensor([1, 2]), torch.tensor([1, 3]), {"atol": 5, "rtol": 5})[0]  # ints are exact


def test_aliasing_unchanged_and_distinct():
    x = torch.arange(6.0)
    assert "shares memory" in compare.aliasing(x[2:], (x,))
    assert compare.aliasing(x.clone(), (x,)) is None
    before = compare.clone((x,))
    x[0] = 9
    assert "modified" in compare.unchanged((x,), before)
    buf = torch.ones(3)
    assert "persistent buffer" in compare.distinct([buf, buf])


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

    def refill(key):
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
    measured = t.run("size x", {"reference": clocks.side(impl), "candidate": clocks.side(impl)}, lambda key: None,
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


# ---- GPU lease pool ------------------------------------------------------------------------
def _hold(path, n, out, key):
    pool = GpuPool(Path(path), [0, 1, 2, 3])
    with pool.lease(n, key) as lease:
        out[key] = (lease["gpus"], time.time())
        time.sleep(0.5)


@pytest.mark.e2e
def test_lease_pool_never_shares_a_gpu(tmp_path):
    pool = GpuPool(tmp_path / "pool.json", [0, 1, 2, 3])
    a = pool.try_acquire(2, "a")
    b = pool.try_acquire(2, "b")
    assert a and b and not set(a) & set(b)
    assert pool.try_acquire(1, "c") is None
    assert pool.release(a, "a") == ["b"]
    assert pool.try_acquire(2, "c") == a
    with mp.Manager() as m:
        out = m.dict()
        procs = [mp.Process(target=_hold, args=(tmp_path / "p2.json", 2, out, f"k{i}")) for i in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        held = dict(out)
    assert len(held) == 4
    # any two leases that overlapped in time used disjoint GPUs
    for k1, (g1, t1) in held.items():
        for k2, (g2, t2) in held.items():
            if k1 < k2 and abs(t1 - t2) < 0.5:
                assert not set(g1) & set(g2)


def test_exclusive_lease_takes_the_whole_machine(tmp_path):
    pool = GpuPool(tmp_path / "pool.json", [0, 1, 2, 3])
    assert pool.try_acquire(2, "a", exclusive=True) == [0, 1]
    assert pool.try_acquire(1, "b") is None


def test_dead_holder_lease_is_reclaimed(tmp_path):
    pool = GpuPool(tmp_path / "pool.json", [0, 1])
    pool.try_acquire(2, "a")
    import json
    state = json.loads((tmp_path / "pool.json").read_text())
    for lease in state["held"].values():
        lease["pid"] = 2 ** 22 + 12345      # no such process
    (tmp_path / "pool.json").write_text(json.dumps(state))
    assert pool.try_acquire(2, "b") == [0, 1]


# ---- problem validation --------------------------------------------------------------------
@pytest.mark.parametrize("field,value,message", [
    ("category", "misc", "field 'category' is 'misc'; expected one of"),
    ("world_sizes", [], "field 'world_sizes' must be a non-empty list"),
    ("dtype", "int3", "field 'dtype' is 'int3'"),
    ("sizes", {"small": {"n": 1}}, "must define 'tiny'"),
    ("forbid", ["nccl"], "field 'forbid' has 'nccl'"),
    ("tolerance", {"atol": -1}, "field 'tolerance.atol'"),
    ("colour", "blue", "unknown field 'colour'"),
    ("parallelism", "tp", "field 'parallelism' must be a list"),
])
def test_bad_yaml_field_names_file_and_field(tmp_path, field, value, message):
    problems, _ = make_tree(tmp_path, {"p": ""}, yaml_patch={field: value})
    with pytest.raises(ProblemError) as e:
        load_problem(problems / "collective" / "p" / "problem.yaml", problems)
    assert message in str(e.value) and "problem.yaml" in str(e.value)


def test_missing_harness_function_and_reference(tmp_path):
    problems, _ = make_tree(tmp_path, {"p": ""})
    folder = problems / "collective" / "p"
    (folder / "harness.py").write_text("def inputs(size, rank, world_size, gen, device, dtype):\n    return ()\n")
    with pytest.raises(ProblemError, match="harness.py: missing function 'cost\\(\\)'"):
        load_problem(folder / "problem.yaml", problems)
    (folder / "reference.py").unlink()
    with pytest.raises(ProblemError, match="reference.py: missing"):
        load_problem(folder / "problem.yaml", problems)


def test_real_problems_load():
    for y in PROBLEMS.glob("*/*/problem.yaml"):
        p = load_problem(y, PROBLEMS)
        assert p.id == y.parent.relative_to(PROBLEMS).as_posix()
        assert p.category in p.markers and p.difficulty in p.markers


# ---- launch helpers ------------------------------------------------------------------------
TORCHRUN_SUMMARY = """Failures:
[1]:
  time      : 2026-11-21_05:15:31
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 8611)
  error_file: <N/A>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 3 (pid: 8610)
"""


def test_dead_ranks_are_read_from_torchrun_summary():
    assert outcome._dead_ranks(TORCHRUN_SUMMARY) == [(1, -11), (0, 3)]
    assert outcome._describe_exit(-11) == "signal SIGSEGV"


def test_log_cap_truncates_but_keeps_head(tmp_path):
    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "rank0.log"
    log.write_bytes(b"first line\n" + b"x" * 5000)
    assert launch.cap_logs(tmp_path, limit=1000) == ["rank0.log"]
    assert log.stat().st_size == 0 and (tmp_path / "logs" / "rank0.head").read_bytes().startswith(b"first line")


@pytest.mark.e2e
def test_process_hunter_kills_a_setsid_grandchild(tmp_path):
    import subprocess
    import sys
    token = os.urandom(4).hex()
    script = ("import subprocess, time, os\n"
              "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
              "time.sleep(300)\n")
    env = {**os.environ, "KB_JOB_TOKEN": token}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    hunter = procs.ProcessHunter(proc.pid, token)
    time.sleep(1.0)
    found = hunter.scan()
    assert len(found) >= 2
    hunter.kill_all(grace_s=0.5)
    proc.wait(5)
    assert not {p for p in found if procs.alive(p)}


# ---- calibration cache ---------------------------------------------------------------------
def test_calibration_is_cached_and_measured_ceilings_win(tmp_path, monkeypatch):
    from pytest_kernelbench.metrics import calibrate
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    machine = {"gpus": [{"name": "NVIDIA H200"}], "gpu_model": "NVIDIA H200", "driver": "580", "torch": "2.11"}
    path = calibrate.cache_path(machine)
    path.parent.mkdir(parents=True)
    path.write_text('{"link_bw": 4.8e11, "hbm_bw": 4.3e12}')
    calls = []
    import subprocess
    monkeypatch.setattr(calibrate.subprocess, "run",
                        lambda *a, **k: (calls.append(a), subprocess.CompletedProcess(a, 1, "", "boom"))[1])
    measured = calibrate.calibrated(machine)
    assert measured["link_bw"] == 4.8e11 and not calls              # cache hit: nothing measured
    c = calibrate.ceilings(machine, measured)
    # the larger figure wins: a probe that fell short of the wires must not lower the roof
    assert c["link_bw"] == 4.8e11 and c["hbm_bw"] == 4.8e12 and c["peak_flops"] == 989e12
    assert "link_bw measured" in c["source"] and "hbm_bw published H200" in c["source"]
    assert "boom" in calibrate.calibrated(machine, force=True)["error"]
    assert len(calls) == 1                                           # --kb-calibrate=force measures again
    assert "NVLink per GPU per direction" in calibrate.table(machine, measured)


@pytest.mark.e2e
def test_calibration_subprocess_runs_without_gpus(tmp_path, monkeypatch):
    from pytest_kernelbench.metrics import calibrate
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    measured = calibrate.calibrated({"gpus": [], "torch": "x"}, force=True)
    assert measured.get("gpus") == 0, measured


def test_terminal_table_shows_roofline_and_suspect_flag():
    from pytest_kernelbench import report
    sizes = [{"name": "large", "speedup": 3.0, "cost": {"link_bytes": 100},
              "timing": {"reference": {"median_s": 2.0}, "candidate": {"median_s": 0.5}}}]
    item = {"problem": "collective/all_reduce", "nodeid": "x", "outcome": "passed", "world_size": 4, "device": "cuda",
            "candidate": {"label": "shipped:symm_mem"}, "sizes": sizes, "score": 3.0, "verdict": "better", "wall_s": 9.0}
    item.update(roofline.annotate(sizes, {"link_bw": 100.0}))
    lines = report.table([item])
    assert "passed (suspect)" in lines[1] and "200%" in lines[1] and "3.00x" in lines[1]


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
