"""The oracles' self-test (issue 49), both directions, over every problem whose reference runs on
gloo: planted wrong kernels (a skipped rank, the previous call's result, a peer's stale input, a
peer's result, half the output zeroed) must fail the checker's own comparison wherever they change
the output; honest kernels (reducing collectives summed in reversed rank order in float32, or in
rank order rounded to bfloat16 at every step as NCCL's ring does, and the whole reference in
float32 judged against the reference and against its bfloat16-ring twin) must pass. At the
harness's scale and at 2^-10 and 2^10 times it (numeric stress).

One rank job per world size (bench/oracle_audit.py: W = 2, else the problem's smallest), size tiny,
no plugin run: the kernels are the reference transformed (a copy of the reference is what the
plugin's reference_copy check exists to refuse), judged by rank.checks.check_call.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from kbrun import REPO, inner_env

from pytest_kernelbench.spec.problem import load_problem

pytestmark = pytest.mark.e2e      # starts rank processes (tests/e2e_guard.py)

# (problem, honest kernel) that may fail or read "error", and why (none today)
HONEST_EXEMPT: dict[tuple[str, str], str] = {}
# (problem, skip_rank | missing_barrier) where no rank's inputs reach another rank's output, and why
# (none today)
PEERLESS: dict[tuple[str, str], str] = {}
# (problem, scale) whose scaled inputs are not a valid input set of the problem, and why: there a
# planted kernel may land within the honest spread (n/a), as it should
STRESS_EXEMPT: dict[tuple[str, str], str] = {
    ("fusion/decode_gemv_allreduce", "2^-10"): "x and the weight both scale, so the all-reduced GEMV "
    "(2^-20 of its size) vanishes next to the residual (2^-10): a rank's partial no longer shows",
    ("p2p/zigzag_ring_attention_backward", "2^10"): "out and lse are the forward of q, k, v at the "
    "harness's scale (lse a log): scaled they are no forward at all, and the gradients overflow",
}


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    out = tmp_path_factory.mktemp("oracles") / "audit.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "oracle_audit.py"), f"--json={out}", "--timeout=600"],
                          cwd=REPO, capture_output=True, text=True, timeout=700, env=inner_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0 and out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def problems():
    return [load_problem(y, REPO / "problems") for y in sorted((REPO / "problems").glob("*/*/problem.yaml"))]


def rows(audit):
    """(problem id, scale, kernel, status, message) for every kernel run."""
    for pid, res in audit.items():
        for scale, row in res.items():
            if scale == "world" or isinstance(row, str):
                continue
            for kind, cell in row.items():
                yield pid, scale, kind, cell["status"], cell["message"]


def test_every_problem_that_runs_on_cpu_is_audited(audit):
    """A problem with a CPU path must run here; a CUDA-only one may not (its harness or reference
    needs the device), and says why."""
    missing = [p.id for p in problems() if p.id not in audit]
    assert not missing, f"not audited: {missing}"
    broken = {p.id: audit[p.id]["error"] for p in problems() if "cpu" in p.devices and "error" in audit[p.id]}
    assert not broken, broken


def test_planted_wrong_kernels_all_fail(audit):
    missed = [(pid, scale, kind) for pid, scale, kind, status, _ in rows(audit)
              if not kind.startswith("honest") and kind != "fp32_vs_native" and status not in ("caught", "n/a")]
    assert not missed, f"planted wrong kernels the checker passed (or could not run): {missed}"


def test_stale_and_half_outputs_are_wrong_everywhere(audit):
    """Every problem's output depends on its inputs, and every output has a second half: these two
    are never honest, so they are never n/a."""
    soft = [(pid, scale, kind, status) for pid, scale, kind, status, _ in rows(audit)
            if kind in ("stale", "half") and status != "caught"]
    assert not soft, soft


def test_a_skipped_rank_and_a_missing_barrier_fail_every_multi_rank_problem(audit):
    """Some rank's inputs reach some other rank's output in every problem of W > 1 (else it is not
    a communication problem), so dropping them, or reading them a call late, is caught there."""
    free = []
    for pid, res in audit.items():
        if "error" in res or res["world"] < 2:
            continue
        for scale, row in res.items():
            if scale == "world" or isinstance(row, str):
                continue
            for kind in ("skip_rank", "missing_barrier"):
                if not any(v["status"] == "caught" for k, v in row.items() if k.rstrip("0123456789") == kind) \
                        and (pid, kind) not in PEERLESS and (pid, scale) not in STRESS_EXEMPT:
                    free.append((pid, scale, kind))
    assert not free, free


def test_honest_kernels_in_another_order_all_pass(audit):
    failed = [(pid, scale, kind, status, msg[:160]) for pid, scale, kind, status, msg in rows(audit)
              if (kind.startswith("honest") or kind == "fp32_vs_native") and status != "passed"
              and (pid, kind) not in HONEST_EXEMPT]
    assert not failed, failed


def test_a_skipped_rank_fails_sharded_rmsnorm_at_eight_ranks(tmp_path):
    """Red team: with one x scale per rank, a rank drawn near 1/4 weighed ~1 % of the rows' mean
    square at W = 8, and a norm that skipped it passed (skip_rank0 MISSED before the harness drew
    a scale per rank and row)."""
    out = tmp_path / "w8.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "oracle_audit.py"), f"--json={out}", "--world=8",
                           "--scales=1", "--problems=utility/sharded_rmsnorm", "--timeout=400"],
                          cwd=REPO, capture_output=True, text=True, timeout=500, env=inner_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0 and out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    row = json.loads(out.read_text())["utility/sharded_rmsnorm"]["1"]
    assert {k: v["status"] for k, v in row.items() if k.startswith("skip_rank")} == \
        {"skip_rank7": "caught", "skip_rank0": "caught"}, row
