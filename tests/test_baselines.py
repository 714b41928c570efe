"""Baselines per backend (issue 48): problem.yaml `baselines` / `reference_label`, --kb-baselines,
the rounds with more sides (rank/timing.py), the size record's vs / best_backend, the per-size view's
"vs NAME" columns. One inner CPU run (gloo) serves every end-to-end test of the module."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest
import yaml

from kbrun import PROBLEMS, REPO, RING, by_problem, make_tree, run
from pytest_kernelbench.options import Settings, parse_baselines
from pytest_kernelbench.protocol import TimingSpec
from pytest_kernelbench.rank.stats import paired_speedup
from pytest_kernelbench.rank.timing import LONE_PAIRS, Timing
from pytest_kernelbench.report import persize
from pytest_kernelbench.spec import baselines
from pytest_kernelbench.spec.problem import ProblemError, load_problem

SLOW_S = 0.006      # what the slow baseline adds a call: far above gloo's noise at the tiny size
REF_SLEEP_S = 0.002     # the fixture's reference, slowed so that the plain baseline beats it clearly

# the reference's all-reduce, plain (faster than the fixture's slowed reference) and slowed down
PLAIN = """import torch.distributed as dist

def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out
"""
SLOW = PLAIN.replace("import torch", "import time\nimport torch").replace(
    "    return out", f"    time.sleep({SLOW_S})\n    return out")
# right when the checker checks it (its first call in that process), raising in the reference
# process's timed windows (its warm-up on CPU is 2 calls: the third is a round's)
FLAKY = """import torch.distributed as dist

calls = [0]

def solution(x):
    calls[0] += 1
    if calls[0] >= 3:
        raise ValueError("flaky baseline broke")
    out = x.clone()
    dist.all_reduce(out)
    return out
"""
ZEROS = """import torch

def solution(x):
    return torch.zeros_like(x)
"""


def _write(folder: Path, yaml_patch: dict, files: dict[str, str], reference: str | None = None) -> None:
    data = yaml.safe_load((folder / "problem.yaml").read_text())
    data.update(yaml_patch)
    (folder / "problem.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    for name, text in files.items():
        (folder / "baselines" / name).write_text(text)
    if reference is not None:
        (folder / "reference.py").write_text(reference)


@pytest.fixture(scope="module")
def inner(tmp_path_factory):
    """One inner run over copies of collective/all_reduce (its own baselines/ folder comes along):
    `multi` with a plain and a slowed baseline beside a slowed reference (and the shipped symm_mem one,
    CUDA only); `wrong` with a baseline that returns zeros; `flaky` with one that raises once timed; `ring2` / `ring4` with the shipped
    baselines at W = 2 and 4; `unasked` with a baseline --kb-baselines does not name."""
    root = tmp_path_factory.mktemp("baselines")
    problems, solutions = make_tree(root, {n: RING for n in ("multi", "wrong", "flaky", "ring2", "ring4", "unasked")})
    col = problems / "collective"
    slowed_ref = PLAIN.replace("import torch", "import time\nimport torch").replace(
        "    return out", f"    time.sleep({REF_SLEEP_S})\n    return out")
    _write(col / "multi", {"world_sizes": [2], "baselines": {
        "plain": {"file": "baselines/plain.py", "label": "plain NCCL"},
        "slow": {"file": "baselines/slow.py"},
        "symm_mem_one_shot": {"file": "baselines/symm_mem_one_shot.py", "devices": ["cuda"]}}},
        {"plain.py": PLAIN, "slow.py": SLOW}, reference=slowed_ref)
    _write(col / "wrong", {"world_sizes": [2], "baselines": {"zeros": {"file": "baselines/zeros.py"}}},
           {"zeros.py": ZEROS})
    _write(col / "flaky", {"world_sizes": [2], "baselines": {"flaky": {"file": "baselines/flaky.py"}}},
           {"flaky.py": FLAKY})
    _write(col / "ring2", {"world_sizes": [2]}, {})
    _write(col / "ring4", {"world_sizes": [4]}, {})
    _write(col / "unasked", {"world_sizes": [2], "baselines": {"other": {"file": "baselines/other.py"}}},
           {"other.py": PLAIN})
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-device=cpu", "--kb-cpu-ranks=4",
                    "--kb-per-size", "--kb-baselines=plain,slow,zeros,flaky,ring,symm_mem_one_shot",
                    env={"KB_DEV_ROUND_S": "0.02"})
    assert doc is not None, proc.stdout + proc.stderr
    return proc, doc, by_problem(doc)


@pytest.mark.e2e
def test_two_baselines_show_vs_columns_and_the_best_backend(inner):
    proc, doc, items = inner
    item = items["collective/multi"]
    assert item["outcome"] == "passed", item.get("message")
    s = item["sizes"][0]
    assert set(s["timing"]["baselines"]) == set(s["vs"]) == {"plain", "slow"}
    for name in ("plain", "slow"):
        t = s["timing"]["baselines"][name]
        assert len(t["rounds_s"]) == len(s["timing"]["reference"]["rounds_s"])       # the same rounds
        assert t["iters"] == s["timing"]["reference"]["iters"] and t["p99_s"] >= t["median_s"]
    # the slow one sleeps SLOW_S a call more than the plain one: against it the candidate looks faster
    assert s["vs"]["slow"] > s["vs"]["plain"] and s["vs"]["slow"] > s["cpu_time_ratio"]
    assert s["timing"]["baselines"]["slow"]["median_s"] > SLOW_S
    assert s["best_backend"] == "plain"        # the reference sleeps REF_SLEEP_S a call, the plain one nothing
    # the score's ratio is the reference's alone (CPU: cpu_time_ratio, the paired speedup of reference
    # and candidate rounds), whatever the baselines did
    # (before the lookahead cap, which a loaded machine's noisy lone calls can set off)
    uncapped = (s["timing"].get("lookahead") or {}).get("uncapped_speedup", s["cpu_time_ratio"])
    assert uncapped == pytest.approx(paired_speedup(s["timing"])) and s["cpu_time_ratio"] <= uncapped * (1 + 1e-9)
    assert item["baselines"] == {"reference_label": "reference", "timed": {"plain": "plain NCCL", "slow": "slow"},
                                 "left_out": {"symm_mem_one_shot": "runs on cuda only, not cpu"}}
    schema = json.loads((REPO / "pytest_kernelbench" / "schemas" / "report.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)
    head = next(line for line in proc.stdout.splitlines() if line.startswith("problem") and "ref med us" in line)
    assert "vs plain" in head and "vs slow" in head and "vs ring" in head and head.rstrip().endswith("best")
    row = next(line for line in proc.stdout.splitlines() if line.startswith("collective/multi") and " tiny " in line)
    assert row.rstrip().endswith("plain NCCL") and f"{s['vs']['slow']:.2f}x" in row


@pytest.mark.e2e
def test_a_wrong_baseline_is_the_harness_s_fault_naming_it(inner):
    item = inner[2]["collective/wrong"]
    assert item["outcome"] == "error" and item["failure"] == "harness_error", item.get("message")
    assert "the baseline zeros is wrong" in item["message"] and "not the candidate's" in item["message"]


@pytest.mark.e2e
def test_a_baseline_failing_in_its_timed_window_is_the_harness_s_fault(inner):
    item = inner[2]["collective/flaky"]
    assert item["outcome"] == "error" and item["failure"] == "harness_error", item.get("message")
    assert "the baseline flaky failed (size tiny, timing)" in item["message"] and "flaky baseline broke" in item["message"]


@pytest.mark.e2e
def test_the_ring_baseline_is_correct_at_w2_and_w4(inner):
    items = inner[2]
    for name, world in (("ring2", 2), ("ring4", 4)):
        item = items[f"collective/{name}"]
        assert item["outcome"] == "passed" and item["world_size"] == world, item.get("message")
        assert set(item["sizes"][0]["vs"]) == {"ring"}         # checked before timing, then timed
        assert set(item["baselines"]["left_out"]) == {"symm_mem_one_shot", "symm_mem_two_shot"}
        assert item["baselines"]["left_out"]["symm_mem_one_shot"] == "runs on cuda only, not cpu"
        assert item["baselines"]["left_out"]["symm_mem_two_shot"].startswith("not asked for")


@pytest.mark.e2e
def test_a_baseline_not_asked_for_runs_no_window(inner):
    proc, _, items = inner
    item = items["collective/unasked"]
    assert item["outcome"] == "passed", item.get("message")
    s = item["sizes"][0]
    assert "baselines" not in s["timing"] and "vs" not in s and "best_backend" not in s
    assert set(s["timing"]["spent_s"]) == {"refill", "reference", "candidate", "checks"}
    assert item["baselines"]["timed"] == {} and item["baselines"]["left_out"]["other"].startswith("not asked for")
    assert "(baselines not timed: collective/unasked: other; --kb-baselines=all" in proc.stdout


# ---- without a run ---------------------------------------------------------------------------------
def test_none_is_the_default_and_selects_nothing():
    assert Settings().baselines == "none"
    declared = {"a": {"path": "/x/a.py", "devices": ("cpu", "cuda"), "label": "a"}}
    run_, left = baselines.select(declared, parse_baselines(None), "cpu", True)
    assert run_ == {} and left["a"].startswith("not asked for")
    assert baselines.select(declared, "all", "cpu", True)[0] == {"a": str(Path("/x/a.py").resolve())}
    assert baselines.select(declared, "all", "cpu", False)[1] == {"a": "timing is off"}
    assert parse_baselines("a,b") == ("a", "b")
    with pytest.raises(ValueError, match="--kb-baselines"):
        parse_baselines("A-b")


def _problem_copy(tmp_path: Path, patch: dict) -> Path:
    dst = tmp_path / "problems" / "collective" / "all_reduce"
    shutil.copytree(PROBLEMS / "collective" / "all_reduce", dst, ignore=shutil.ignore_patterns("__pycache__"))
    data = yaml.safe_load((dst / "problem.yaml").read_text())
    data.update(patch)
    (dst / "problem.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return dst / "problem.yaml"


@pytest.mark.parametrize("entry, message", [
    ({"ring": {"file": "baselines/ring.py", "speed": 1}}, "unknown field 'baselines.ring.speed'"),
    ({"gone": {"file": "baselines/gone.py"}}, "field 'baselines.gone.file' names baselines/gone.py, which does not exist"),
    ({"ring": {"file": "../reference.py"}}, "must be a .py file inside the problem folder"),
    ({"ring": {"file": "baselines/ring.py", "devices": ["tpu"]}}, "field 'baselines.ring.devices' has 'tpu'"),
    ({"reference": {"file": "baselines/ring.py"}}, "other than reference and candidate"),
    ({"ring": "baselines/ring.py"}, "field 'baselines.ring' must be a mapping"),
])
def test_problem_yaml_baselines_are_validated(tmp_path, entry, message):
    with pytest.raises(ProblemError, match=message.replace(".", r"\.").replace("(", r"\(")):
        load_problem(_problem_copy(tmp_path, {"baselines": entry}), tmp_path / "problems")


def test_the_shipped_baselines_load_and_match_the_schema():
    schema = json.loads((REPO / "pytest_kernelbench" / "schemas" / "problem.schema.json").read_text())
    for name, declared in (("all_reduce", {"ring", "symm_mem_one_shot", "symm_mem_two_shot"}),
                           ("all_gather", {"symm_mem_copy_engine"}), ("reduce_scatter", {"symm_mem_copy_engine"}),
                           ("allreduce_decode", {"symm_mem_one_shot"})):
        path = PROBLEMS / "collective" / name / "problem.yaml"
        problem = load_problem(path, PROBLEMS)
        assert set(problem.baselines) == declared and problem.reference_label == "NCCL"
        jsonschema.Draft202012Validator(schema).validate(yaml.safe_load(path.read_text()))
    bad = {**yaml.safe_load((PROBLEMS / "collective" / "all_reduce" / "problem.yaml").read_text()),
           "baselines": {"ring": {"file": "baselines/ring.py", "speed": 1}}}
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(bad))


def test_every_side_runs_once_a_round_in_rotated_order():
    # two baselines: each round runs all four sides on the round's values (one refill), each side
    # first in turn, every window as long as the reference's; the lone-call rounds stay two-sided
    log = []

    def side(name):
        def window(calls, key):
            log.append((name, calls, key))
            return 1e-3
        return window

    names = ("reference", "candidate", "b1", "b2")
    spec = TimingSpec(rounds=8, warmup=1, round_s=0.01, max_iters=5000)
    measured = Timing(lambda v: v, lambda msg: None, spec).run(
        "size x", {n: side(n) for n in names}, lambda key, calls, first: log.append(("refill", calls, first)),
        lambda name: 1000, prepare=lambda calls: log.append(("prepare", calls)))
    assert measured["iters"] == dict.fromkeys(names, 10) and set(measured["lone"]) == {"reference", "candidate"}
    rounds = log[log.index(("prepare", 10)) + 1:]
    firsts, at = [], 0
    for r in range(8):
        refill, *windows = rounds[at:at + 5]
        at += 5
        assert refill == ("refill", 10, windows[0][0]) and [w[1] for w in windows] == [10] * 4
        order = [w[0] for w in windows]
        assert order == list(names[r % 4:] + names[:r % 4])
        assert [w[2] for w in windows] == [f"{r}{n[0]}" if n in ("reference", "candidate") else f"{r}:{n}"
                                           for n in order]
        firsts.append(order[0])
        if r < LONE_PAIRS:
            lone = rounds[at:at + 3]
            at += 3
            assert [w[0] for w in lone[1:]] == [n for n in order if n in ("reference", "candidate")]
            assert all(w[1] == 1 for w in lone[1:])
    assert firsts == list(names) * 2
    assert len(measured["times"]["b1"]) == len(measured["times"]["reference"]) == 8


def test_per_size_columns_name_each_baseline_and_the_best():
    size = {"name": "small", "timing": {"reference": {"median_s": 2e-5}, "candidate": {"median_s": 1e-5}},
            "speedup": 2.0, "vs": {"symm_mem_one_shot": 1.25, "ring": 3.5}, "best_backend": "symm_mem_one_shot"}
    item = {"problem": "collective/all_reduce", "nodeid": "x", "outcome": "passed", "world_size": 2, "device": "cuda",
            "sizes": [size], "baselines": {"reference_label": "NCCL", "timed": {"symm_mem_one_shot": "symm_mem one-shot",
                                                                                 "ring": "p2p ring"}, "left_out": {}}}
    lines = persize.table([item])
    assert lines[0].split()[-5:] == ["vs", "symm_mem_one_shot", "vs", "ring", "best"]
    assert "1.25x" in lines[1] and "3.50x" in lines[1] and lines[1].endswith("symm_mem one-shot")
    size["best_backend"] = "reference"
    assert persize.table([item])[1].endswith("NCCL")


def test_a_slow_baseline_never_cuts_the_candidate_s_rounds():
    # adaptive rounds stop at the slow budget of the reference's and the candidate's windows: a
    # baseline 1000x slower runs as many rounds as they do, and they as many as without it
    import random

    def rounds_run(with_baseline: bool) -> int:
        rng = random.Random(7)

        def side(cost):
            return lambda calls, key: cost * (1 + 0.2 * rng.random())
        sides = {"reference": side(1e-3), "candidate": side(1e-3)}
        if with_baseline:
            sides["slow"] = side(1.0)
        spec = TimingSpec(rounds=6, warmup=1, round_s=0.01, max_iters=5000, max_rounds=12, band_target=0.001)
        measured = Timing(lambda v: v, lambda msg: None, spec).run("size x", sides, lambda key, calls, first: None,
                                                                    lambda name: 1000)
        return len(measured["times"]["candidate"])

    assert rounds_run(True) == rounds_run(False) == 12


def test_size_plots_draw_a_line_per_baseline():
    from pytest_kernelbench.cli import sizeplots
    sizes = [{"bytes_per_rank": 8192, "busbw_GBps": {"reference": 1.0, "candidate": 2.0},
              "timing": {"reference": {"median_s": 2e-5}, "candidate": {"median_s": 1e-5},
                         "baselines": {"ring": {"median_s": 3e-5, "busbw_GBps": 0.5}}}}]
    item = {"baselines": {"reference_label": "NCCL", "timed": {"ring": "p2p ring"}, "left_out": {}}}
    lines = sizeplots._lines(item, sizes)
    assert [(side, label) for side, _, _, label in lines] == [
        ("candidate", "candidate"), ("reference", "reference (NCCL)"), ("baseline:ring", "p2p ring")]
    assert sizeplots._side(sizes[0], "baseline:ring")["median_s"] == 3e-5
    assert sizeplots._bw(sizes[0], "baseline:ring", "busbw") == 0.5 and sizeplots._bw(sizes[0], "reference", "busbw") == 1.0


def test_baseline_windows_count_as_timed_time():
    from pytest_kernelbench.metrics import timed_seconds
    size = {"timing": {"reference": {"rounds_s": [1.0, 1.0], "iters": 2}, "candidate": {"rounds_s": [0.5], "iters": 2},
                       "baselines": {"ring": {"rounds_s": [2.0, 2.0], "iters": 2}}}}
    assert timed_seconds(size) == pytest.approx(4 + 1 + 8)


def test_a_failure_the_candidate_could_cause_is_never_an_error():
    # a baseline's own bug is the harness's (error: retried, not scored); running out of memory the
    # candidate holds, or losing a peer the candidate stopped, stays a verdict (the reference's rule)
    from pytest_kernelbench.rank.baselines import failure
    assert failure("TypeError: bad argument", 2) == "harness_error"
    assert failure("OutOfMemoryError: CUDA out of memory", 2) == "runtime_error"
    assert failure("DistBackendError: connection reset by peer", 2) == "runtime_error"
    assert failure("DistBackendError: connection reset by peer", 1) == "harness_error"
