"""The suite on a Slurm cluster (issue 26), on a real Slurm simulated on this machine
(tests/slurm_cluster.py: two slurmd "nodes" n1/n2 on this host). Skips where Slurm cannot start."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from kbrun import REPO, inner_env, plugin_args
from slurm_cluster import SlurmCluster, SlurmUnavailable, _marked


@pytest.fixture(scope="module")
def cluster():
    root = Path(tempfile.mkdtemp(prefix="kbslurm-"))   # short: the munge socket path has a length limit
    c = SlurmCluster(root)
    try:
        c.start()
    except SlurmUnavailable as e:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"no Slurm here: {e}")
    yield c
    c.stop()
    left = _marked(str(root))
    shutil.rmtree(root, ignore_errors=True)
    assert not left, f"processes of the simulated cluster left after stop: {left}"


def test_cluster_has_two_nodes(cluster):
    r = cluster.run(["srun", "-N2", "--ntasks-per-node=1", "bash", "-c", 'echo "$SLURM_PROCID $SLURMD_NODENAME"'])
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:-1]) == ["0 n1", "1 n2"]


# ---- 1. items spread over the nodes: --kb-slurm-workers ---------------------------------------------
SELECTION = ["problems/collective/all_reduce", "problems/collective/broadcast", "problems/collective/all_gather",
             "problems/collective/reduce"]


def _inner(cluster: SlurmCluster, report: Path, *args: str, salloc: list[str] | None = None,
           timeout: float = 500) -> tuple[subprocess.CompletedProcess, dict | None]:
    """pytest with the plugin, from the repo root; under `salloc` when given (an allocation)."""
    env = {**inner_env(), "SLURM_CONF": cluster.env["SLURM_CONF"], "KB_SLURM_CLUSTER": cluster.env["KB_SLURM_CLUSTER"]}
    cmd = [*(salloc or []), sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q",
           f"--kb-report={report}", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    return proc, (json.loads(report.read_text()) if report.exists() else None)


def test_worker_steps_spread_items_over_both_nodes(cluster, tmp_path):
    """(a) A CPU selection through Slurm worker steps runs on both nodes, each record names its node
    and step, and the verdicts are those of a local run."""
    args = [*SELECTION, "--kb-device=cpu", "--kb-nproc=2"]
    local, local_doc = _inner(cluster, tmp_path / "local.json", *args)
    assert local_doc, local.stdout[-2000:] + local.stderr[-2000:]
    proc, doc = _inner(cluster, tmp_path / "slurm.json", *args, "--kb-slurm-workers=2",
                       salloc=["salloc", "-N2", "--ntasks-per-node=1"])
    assert doc, proc.stdout[-2000:] + proc.stderr[-2000:]
    verdicts = {i["problem"]: (i["outcome"], i.get("failure")) for i in doc["items"]}
    assert verdicts == {i["problem"]: (i["outcome"], i.get("failure")) for i in local_doc["items"]}
    assert set(verdicts) == {s.split("/", 1)[1] for s in SELECTION}
    assert {i["host"] for i in doc["items"]} == {"n1", "n2"}, [(i["problem"], i.get("host")) for i in doc["items"]]
    steps = {i["host"]: i["slurm_step"] for i in doc["items"]}
    assert all(re.fullmatch(r"\d+\.\d+", s) for s in steps.values()) and len(set(steps.values())) == 2, steps
    assert all(i.get("slurm_step") is None for i in local_doc["items"])
    assert not cluster.stray(), "a worker step outlived the run"


def test_worker_steps_need_an_allocation(cluster, tmp_path):
    proc, doc = _inner(cluster, tmp_path / "r.json", SELECTION[0], "--kb-device=cpu", "--kb-slurm-workers=2")
    assert proc.returncode == 4 and "inside a Slurm allocation" in proc.stderr, proc.stderr[-1000:]


def test_worker_steps_drop_the_allocations_options():
    from pytest_kernelbench.launch.slurm_workers import drop_job_options
    env = {"SLURM_JOB_ID": "7", "SLURM_CONF": "/c", "SLURM_GPUS_PER_NODE": "8", "SLURM_NTASKS": "16", "PATH": "/bin"}
    assert drop_job_options(env) == ["SLURM_GPUS_PER_NODE", "SLURM_NTASKS"]
    assert env == {"SLURM_JOB_ID": "7", "SLURM_CONF": "/c", "PATH": "/bin"}
