"""The per-size view (--kb-per-size) and the developer's numbers in the JSON: nccl-tests' size S
(bytes_per_rank), median and p99 over the rounds, algbw and busbw (metrics/devnums.py)."""
from __future__ import annotations

import json

import jsonschema
import pytest
from kbrun import REPO, RING, make_tree, run

from pytest_kernelbench.metrics import devnums
from pytest_kernelbench.report import persize
from pytest_kernelbench.spec.bandwidth import Scale


def test_percentile_interpolates_like_numpy():
    assert devnums.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert devnums.percentile(list(range(101)), 99) == pytest.approx(99.0)
    assert devnums.percentile([1.0, 2.0], 99) == pytest.approx(1.99)
    assert devnums.percentile([], 99) is None


def size(n: int, t_ref: float, t_cand: float, rounds: int = 10) -> dict:
    ref = [t_ref] * (rounds - 1) + [2 * t_ref]       # one slow round: the p99 sees it, the median not
    return {"name": "s", "config": {"n": n}, "timing": {"reference": {"median_s": t_ref, "rounds_s": ref},
                                                       "candidate": {"median_s": t_cand, "rounds_s": [t_cand] * rounds}},
            "speedup": t_ref / t_cand, "band": [1.9, 2.1], "roofline": {"candidate": 0.5}}


def test_annotate_all_reduce_numbers():
    s = size(134217728, 2e-3, 1e-3)           # 256 MiB of bf16 over 8 ranks
    devnums.annotate([s], "all_reduce", Scale("n", 2), 8)
    S = 134217728 * 2
    assert s["bytes_per_rank"] == S
    assert s["algbw_GBps"] == {"reference": pytest.approx(S / 2e-3 / 1e9), "candidate": pytest.approx(S / 1e-3 / 1e9)}
    assert s["busbw_GBps"]["candidate"] == pytest.approx(S / 1e-3 / 1e9 * 2 * 7 / 8)
    ref = s["timing"]["reference"]
    assert ref["median_s"] == 2e-3 and 2e-3 < ref["p99_s"] <= 4e-3
    assert s["timing"]["candidate"]["p99_s"] == pytest.approx(1e-3)


def test_annotate_all_gather_counts_the_gathered_array_and_none_has_no_busbw():
    s = size(4096, 1e-5, 1e-5)
    devnums.annotate([s], "all_gather", Scale("n", 2, world=True), 4)
    assert s["bytes_per_rank"] == 4096 * 2 * 4
    assert s["busbw_GBps"]["reference"] == pytest.approx(s["algbw_GBps"]["reference"] * 3 / 4)
    t = size(4096, 1e-5, 1e-5)
    devnums.annotate([t], None, Scale("n", 2), 4)
    assert "algbw_GBps" in t and "busbw_GBps" not in t
    u = size(4096, 1e-5, 1e-5)
    devnums.annotate([u], None, None, 4)       # no scale: only the percentiles
    assert "bytes_per_rank" not in u and "algbw_GBps" not in u and "p99_s" in u["timing"]["reference"]


def test_per_size_table_columns():
    s = size(524288, 2e-5, 1e-5)
    devnums.annotate([s], "all_reduce", Scale("n", 2), 2)
    item = {"problem": "collective/all_reduce", "nodeid": "x", "outcome": "passed", "world_size": 2,
            "device": "cuda", "sizes": [s]}
    lines = persize.table([item])
    assert lines[0].split()[:4] == ["problem", "W", "size", "bytes"]
    for col in ("ref med us", "ref p99 us", "cand med us", "cand p99 us", "algbw GB/s ref/cand",
                "busbw GB/s ref/cand", "speedup [band]", "roof%"):
        assert col in lines[0]
    row = lines[1]
    algbw = 1048576 / 2e-5 / 1e9
    assert "1M" in row and "20.0" in row and "10.0" in row
    assert f"{algbw:.1f}/{2 * algbw:.1f}" in row
    assert "2.00x [1.90-2.10]" in row and "50%" in row
    assert persize.human_bytes(8192) == "8K" and persize.human_bytes(1 << 30) == "1G" and persize.human_bytes(1000) == "1000"


@pytest.mark.e2e
def test_per_size_view_of_a_cpu_run_and_its_json(tmp_path):
    problems, solutions = make_tree(tmp_path, {"ring": RING})
    proc, doc = run(tmp_path, str(problems), f"--kb-solutions={solutions}", "--kb-device=cpu", "--kb-cpu-ranks=2",
                    "--kb-per-size")
    assert doc is not None, proc.stdout + proc.stderr
    item = doc["items"][0]
    assert item["outcome"] == "passed", item.get("message")
    assert item["busbw"] == "all_reduce"
    s = item["sizes"][0]
    assert s["bytes_per_rank"] == 4096 * 2
    assert set(s["algbw_GBps"]) == set(s["busbw_GBps"]) == {"reference", "candidate"}
    # --kb-baselines is none by default: the ring baseline all_reduce declares runs no window
    assert "baselines" not in s["timing"] and "vs" not in s and item["baselines"]["timed"] == {}
    for side in ("reference", "candidate"):
        t = s["timing"][side]
        assert t["p99_s"] >= t["median_s"]
        assert s["busbw_GBps"][side] == pytest.approx(s["algbw_GBps"][side] * 2 * 1 / 2)
    schema = json.loads((REPO / "pytest_kernelbench" / "schemas" / "report.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(doc)
    out = proc.stdout
    assert "ref p99 us" in out and "busbw GB/s ref/cand" in out
    row = next(line for line in out.splitlines() if line.startswith("collective/ring") and " tiny " in line)
    assert " 8K " in row
