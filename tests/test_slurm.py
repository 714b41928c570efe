"""The suite on a Slurm cluster (issue 26), on a real Slurm simulated on this machine
(tests/slurm_cluster.py: two slurmd "nodes" n1/n2 on this host). Skips where Slurm cannot start."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
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
