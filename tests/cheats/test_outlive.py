"""Red team of issue 44's class 8: processes that outlive the job. A candidate starts a daemon that
forks and exits in a loop (each generation forks one child and exits at once), so that whatever a
scan of /proc finds has already forked by the time its SIGKILL lands. Against scans alone
(procs.ProcessHunter, Link.close) the chain was alive after the inner pytest ended; with each job in
a cgroup of its own, killed whole at its end (contain.py), nothing of it is left.

Each chain is bounded so that it cannot harm the machine it runs on: its first process (R) is a
child subreaper that reaps every generation (no zombies pile up while it lives); once R is gone,
the chain goes on at most TAIL_S seconds or TAIL_GENS generations (their zombies go to our
subreapers, who reap them), and the last one sleeps HOLD_S seconds, then exits. The test
kills what it finds.
"""
from __future__ import annotations

import os
import signal
import time

import pytest
from cheatlib import HONEST
from kbrun import by_problem, explain, make_tree, run

pytestmark = pytest.mark.e2e

TAG = "kb-forkchain"
CHAINS = 4          # independent chains: each kill pass must win against all of them
TAIL_S = 1.5        # how long each chain goes on once its R is gone,
TAIL_GENS = 3000    # and at most this many generations (each leaves a zombie until reaped)
HOLD_S = 40         # the last one's sleep: the outer test looks for it after the inner pytest ends

CHAIN = f'''
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(36, 1, 0, 0, 0)            # PR_SET_CHILD_SUBREAPER: R reaps the generations it outlives
R, ready, end = os.getpid(), int(sys.argv[2]), time.monotonic() + 90
if os.fork():                          # R: reap until the chain ends or R is killed
    os.close(ready)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.01)
            if time.monotonic() > end:
                os._exit(0)
os.write(ready, b"1")
os.close(ready)
prev, tail, gens = R, None, 0
while time.monotonic() < end:
    if tail is None:                   # R reaps: as fast as it can (the kill that took R comes next)
        if os.getppid() not in (R, prev):
            tail = time.monotonic() + {TAIL_S}
    else:                              # R is gone: each generation leaves a zombie to our subreapers
        gens += 1
        if time.monotonic() > tail or gens > {TAIL_GENS}:
            break
    prev = os.getpid()
    if libc.fork():                    # libc's: none of os.fork's interpreter hooks, ~0.1 ms a generation
        os._exit(0)                    # the generation that was found is already someone else
    libc.setsid()                      # a session of its own each time: no session to follow
time.sleep({HOLD_S})                   # the last one stays: the outer test finds it after pytest
'''

CHEATS = {
    "c8_fork_chain": HONEST + f'''
import os, subprocess, sys
_CHAIN = {CHAIN!r}
_started = []
def solution(x):
    for _ in range({CHAINS} - len(_started)):   # at the first call: chains from here to past the job's end
        r, w = os.pipe()
        env = {{k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "TORCH_", "NVSHMEM_"))}}   # no job token
        _started.append(subprocess.Popen([sys.executable, "-c", _CHAIN, "{TAG}", str(w)], env=env,
                                         pass_fds=(w,), start_new_session=True))
        os.close(w)
        os.read(r, 1)                  # the chain forks before this call returns
        os.close(r)
    return _p2p_sum(x)
''',
}


def _chain_pids(root: str) -> list[int]:
    """Living processes of this test's chains (their command line has TAG, their folder is the job's)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if TAG.encode() not in f.read() or not os.readlink(f"/proc/{name}/cwd").startswith(root):
                    continue
            with open(f"/proc/{name}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    found.append(int(name))
        except (OSError, ValueError, IndexError):
            pass
    return found


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("outlive")
    problems, solutions = make_tree(root, CHEATS)
    try:
        proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-keep-jobs",
                        "--kb-timeout=60", "-p", "no:randomly", timeout=600)
        left, end = set(), time.monotonic() + TAIL_S + 2.0     # a chain still forking shows now and then
        while time.monotonic() < end:
            left.update(_chain_pids(str(root)))
            time.sleep(0.05)
        yield {"proc": proc, "doc": doc, "left": left, "root": root}
    finally:
        for pid in _chain_pids(str(root)):     # only what this test's candidate started
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_8_a_fork_chain_does_not_outlive_its_job(judged):
    assert judged["doc"] is not None, judged["proc"].stdout[-5000:] + judged["proc"].stderr[-5000:]
    it = by_problem(judged["doc"])["collective/c8_fork_chain"]
    # whatever the verdict (the chain is a process alive after the call: forbidden_call), the job's
    # processes are gone when it ends
    assert it["outcome"] == "failed", explain(it)
    assert not judged["left"], f"alive after the job: {sorted(judged['left'])}"


def test_8_the_header_names_the_containment(judged):
    out = judged["proc"].stdout
    assert "kernelbench: containment of jobs: " in out, out[-3000:]
