"""--kb-sweep=BEGIN:END:FACTOR (nccl-tests' -b/-e/-f): the sizes of a sweep through the size field
problem.yaml declares (scale), rounded to its multiple and bounded by its max; items record every
size of the sweep; named sizes still run when --kb-sizes names them."""
from __future__ import annotations

import pytest
from kbrun import PROBLEMS, RING, make_tree, run

from pytest_kernelbench import plugin
from pytest_kernelbench.spec import bandwidth
from pytest_kernelbench.spec.problem import load_problem


def test_sweep_sizes_are_nccl_tests_b_e_f():
    assert bandwidth.parse_sweep("8K:256M:2") == (8192, 256 << 20, 2)
    assert bandwidth.parse_sweep("1M:1G") == (1 << 20, 1 << 30, 2)
    sizes = bandwidth.sweep_bytes(*bandwidth.parse_sweep("8K:256M:2"))
    assert len(sizes) == 16 and sizes[0] == 8192 and sizes[-1] == 256 << 20
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    assert bandwidth.sweep_bytes(*bandwidth.parse_sweep("8K:1M:4")) == [8 << 10, 32 << 10, 128 << 10, 512 << 10]
    for bad in ("8K", "256M:8K:2", "8K:1M:1", "8K:1M:x", "8Q:1M", "0:1M"):
        with pytest.raises(ValueError):
            bandwidth.parse_sweep(bad)


def _problem(name: str):
    return load_problem(PROBLEMS / "collective" / name / "problem.yaml", PROBLEMS)


def test_all_reduce_sweep_configs():
    p = _problem("all_reduce")
    cfgs = bandwidth.sweep_configs(p.scale, {}, 8, bandwidth.parse_sweep("8K:256M:2"))
    assert list(cfgs)[:3] == ["8K", "16K", "32K"] and list(cfgs)[-1] == "256M" and len(cfgs) == 16
    assert cfgs["8K"] == {"n": 4096} and cfgs["256M"] == {"n": 134217728}      # bf16: n = S / 2


def test_all_gather_sweep_counts_the_gathered_array_and_rounds_to_the_multiple():
    p = _problem("all_gather")
    cfgs = bandwidth.sweep_configs(p.scale, {}, 4, bandwidth.parse_sweep("8K:128K:2"))
    # S = W x n x 2 with n a multiple of 4096: the smallest S over 4 ranks is 32K; 8K and 16K round up to it
    assert cfgs == {"32K": {"n": 4096}, "64K": {"n": 8192}, "128K": {"n": 16384}}


def test_a_sweep_stops_at_the_field_max():
    p = _problem("nccl_device_allreduce")           # n at most 524288 (1 MiB)
    cfgs = bandwidth.sweep_configs(p.scale, {}, 2, bandwidth.parse_sweep("256K:16M:2"))
    assert list(cfgs) == ["256K", "512K", "1M"]


def test_bad_sweep_is_a_usage_error(tmp_path):
    class Config:
        rootpath = tmp_path

        def getoption(self, name):
            return "8K:1M:1" if name == "kb_sweep" else None

        def getini(self, name):
            return None
    with pytest.raises(pytest.UsageError, match="--kb-sweep: '8K:1M:1': FACTOR"):
        plugin.settings_from(Config())


@pytest.mark.e2e
def test_an_item_records_every_size_of_the_sweep(tmp_path):
    problems, solutions = make_tree(tmp_path, {"ring": RING})
    make_tree(tmp_path, {"gemm": "def solution(*a):\n    return None\n"}, base="fusion/gemm_allreduce")
    proc, doc = run(tmp_path, str(problems), f"--kb-solutions={solutions}", "--kb-device=cpu", "--kb-cpu-ranks=2",
                    "--kb-sweep=8K:32K:2", "--kb-sizes=tiny", "--kb-trials=1", "--kb-per-size")
    assert doc is not None, proc.stdout + proc.stderr
    items = {i["problem"]: i for i in doc["items"]}
    ring = items["collective/ring"]
    assert ring["outcome"] == "passed", ring.get("message")
    sizes = [(s["name"], s["config"], s.get("bytes_per_rank"), s.get("sweep", False)) for s in ring["sizes"]]
    assert sizes == [("tiny", {"n": 4096}, 8192, False), ("8K", {"n": 4096}, 8192, True),
                     ("16K", {"n": 8192}, 16384, True), ("32K", {"n": 16384}, 32768, True)]
    gemm = items["fusion/gemm"]                      # declares no scale: skipped, saying why
    assert gemm["outcome"] == "skipped" and "declares no size field that scales" in gemm["message"]
    assert " 32K " in next(ln for ln in proc.stdout.splitlines() if ln.startswith("collective/ring") and "32K" in ln)
