"""Red team on one CUDA GPU (skipped without CUDA or cuda-python): GPU work a candidate leaves
running after "done" that writes no output, judged by one run of the real plugin at W = 1 (size
`small`), beside a control that must still pass. The cheat: gpu_linger.py (a kernel in a second
CUDA context, spinning from each of its windows' ends to its next window; the device-wide
synchronize at "done" covers the primary context only). On d33e1ea it passed; on an H100 the
reference process's probe then waited for the GPU before 41 of 67 of its windows
(reports/baselines/2026-11-27-h100x1-linger.md)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from kbrun import by_problem, make_tree, run

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("cuda") is None,
    reason="needs a CUDA GPU and cuda-python")]

CANDIDATES = {
    "gpu_clone": "def solution(x):\n    return x.clone()\n",       # the sum over one rank
    "gpu_linger": (Path(__file__).parent / "gpu_linger.py").read_text(),
}


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_w1_cheats")
    problems, solutions = make_tree(root, CANDIDATES, yaml_patch={"world_sizes": [1]})
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-device=cuda", "--kb-sizes=small",
                    "--kb-timeout=300", timeout=900)
    assert doc is not None, proc.stdout[-5000:] + proc.stderr[-5000:]
    return by_problem(doc)


def test_the_control_passes_with_quiet_probes(judged):
    it = judged["collective/gpu_clone"]
    assert it["outcome"] == "passed", it["message"]
    probe = it["sizes"][0]["timing"]["gpu_probe"]["reference"]
    assert probe["windows"] >= 16 and probe["slow"] < 0.2 * probe["windows"]


def test_gpu_work_left_running_after_done_fails(judged):
    it = judged["collective/gpu_linger"]
    assert it["outcome"] == "failed" and it["failure"] == "runtime_error", it["message"]
    assert "other GPU work was running when" in it["message"]
