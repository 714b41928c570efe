"""procs: the process hunter finds and kills a job's processes, setsid grandchildren too."""
from __future__ import annotations

import os
import time

import pytest

from pytest_kernelbench import procs


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
