"""contain.py: a job's cgroup is killed whole; without one, the hunter kills any orphan of ours."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pytest_kernelbench import contain, procs
from pytest_kernelbench.protocol import Containment

# a chain of generations, each forking the next and exiting at once, for at most 20 s
CHAIN = ("import os, time\n"
         "end = time.monotonic() + 20\n"
         "while time.monotonic() < end:\n"
         "    if os.fork():\n"
         "        os._exit(0)\n"
         "    os.setsid()\n")


def _alive_with(tag: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if tag.encode() in f.read() and procs.alive(int(name)):
                    found.append(int(name))
        except (OSError, ValueError):
            pass
    return found


@pytest.mark.e2e
def test_a_jobs_cgroup_ends_a_fork_chain_at_once():
    if contain.in_force() != Containment.CGROUP:
        pytest.skip("no writable cgroup v2 with cgroup.kill here")
    cg = contain.job_cgroup(f"test-{os.getpid()}")
    assert cg is not None
    tag = f"kbchain{os.urandom(4).hex()}"
    proc = subprocess.Popen([sys.executable, "-c", CHAIN, tag], preexec_fn=lambda: contain.join(str(cg)))
    proc.wait(10)                      # its first generation is already someone else
    end = time.monotonic() + 5
    while not contain.members(cg.path) and time.monotonic() < end:
        time.sleep(0.01)
    assert contain.members(cg.path), "the chain is not running"
    cg.kill(wait_s=5.0)
    assert not cg.path.exists()
    for _ in range(20):                # a generation a scan missed would show again
        assert not _alive_with(tag)
        time.sleep(0.025)


@pytest.mark.e2e
def test_the_hunter_kills_an_orphan_of_ours_from_an_earlier_job():
    """Without a cgroup: a daemon a job left behind is re-parented to us (the subreaper) in a
    session of its own; a later job's hunter, whose ranks are younger than it, still kills it."""
    assert procs.become_subreaper()
    tag = f"kborphan{os.urandom(4).hex()}"
    script = ("import os, sys, time\n"
              "if os.fork():\n"
              "    os._exit(0)\n"
              "os.setsid()\n"
              "time.sleep(60)\n")
    subprocess.run([sys.executable, "-c", script, tag], check=True)     # its child is now ours
    time.sleep(1.1)                     # start times count in clock ticks: the next job's ranks are younger
    (orphan,) = _alive_with(tag)
    assert procs.parent_of(orphan) == os.getpid()
    later = subprocess.Popen(["sleep", "30"], start_new_session=True)    # the next job's rank
    try:
        hunter = procs.ProcessHunter([later.pid], "no-such-token")
        killed = hunter.kill_all(grace_s=0.0)
        assert orphan in killed, killed
    finally:
        later.kill()
        later.wait()
    assert not procs.alive(orphan)
