"""Faults a candidate can cause: the run survives each, ends it with a clear category, and leaves
no process and no change behind. One run of the real plugin judges them all (CPU, 2 ranks), with
a short deadline and process-group timeout so that hangs surface in seconds."""
from __future__ import annotations

import time

import pytest
from cheatlib import HONEST, processes_with, rank_logs, tree_digest
from kbrun import by_problem, leftover_processes, make_tree, run

pytestmark = pytest.mark.e2e      # every test here runs an inner pytest or ranks (tests/e2e_guard.py)

DEADLINE_S = 25
PG_TIMEOUT_S = 4
LOG_CAP = 256 << 10      # KB_LOG_LIMIT_BYTES: the launcher's cap on a rank log, lowered for the test
SLEEP_CHILD, SLEEP_DAEMON = "987.125", "986.125"   # unique arguments to find the children by

FAULTS = {
    "honest_faults_control": HONEST + """
def solution(x):
    return _p2p_sum(x)
""",
    # both misbehave after their first call: the first call of a size is setup, which may compile
    # for as long as the compile budget (--kb-compile-timeout), so a hang there is not fast
    "spin_forever": HONEST + """
_flag = False
_calls = 0
def solution(x):
    global _calls
    _calls += 1
    if _calls == 1:
        return _p2p_sum(x)
    while not _flag:       # a flag nobody sets, spun on without sleeping
        pass
""",
    "skips_collective": HONEST + """
_calls = 0
def solution(x):
    global _calls
    _calls += 1
    out = x.clone()
    if _calls == 1 or dist.get_rank() != 1:
        dist.all_reduce(out)          # after the first call, rank 1 never joins
    return out
""",
    "segfault_rank1": HONEST + """
import ctypes
def solution(x):
    if dist.get_rank() == 1:
        ctypes.string_at(0)
    return _p2p_sum(x)
""",
    "exit1_rank1": HONEST + """
import os
def solution(x):
    if dist.get_rank() == 1:
        os._exit(1)
    return _p2p_sum(x)
""",
    "out_of_memory": HONEST + """
def solution(x):
    buf = torch.empty(1 << 50, dtype=x.dtype)        # 2 PiB: refused at once, nothing is touched
    return _p2p_sum(x)
""",
    "floods_stdout": HONEST + """
import sys, time
_done = False
def solution(x):
    global _done
    if not _done:
        _done = True
        chunk = ("spam " * 40 + "\\n") * 500       # 100 KB
        for _ in range(150):                       # 15 MB over 3 s: far past the cap, not gigabytes
            sys.stdout.write(chunk)
            sys.stdout.flush()
            time.sleep(0.02)
    return _p2p_sum(x)
""",
    "spawns_children": HONEST + f"""
import os, subprocess
_started = False
def _daemon():
    if os.fork() == 0:            # double fork + new session + empty environment: no trail back to us
        os.setsid()
        if os.fork() == 0:
            os.execve("/bin/sleep", ["sleep", "{SLEEP_DAEMON}"], {{}})
        os._exit(0)
def solution(x):
    global _started
    if not _started:
        _started = True
        subprocess.Popen(["sleep", "{SLEEP_CHILD}"])
        _daemon()
    return _p2p_sum(x)
""",
    "writes_problem_tree": HONEST + """
import os, subprocess
def _tree():
    d = os.getcwd()
    while d != os.path.dirname(d) and not os.path.isdir(os.path.join(d, "problems")):
        d = os.path.dirname(d)
    return os.path.join(d, "problems", "collective", "writes_problem_tree")
def solution(x):
    here = _tree()
    for attempt in (lambda: open(os.path.join(here, "harness.py"), "a").write("\\n# owned\\n"),
                    lambda: os.remove(os.path.join(here, "reference.py")),
                    lambda: open(os.path.join(here, "new.py"), "w").write("x = 1\\n")):
        try:
            attempt()
        except Exception as e:
            print("KBPROBE refused:", type(e).__name__, e)
    # a child process with a relative path: no audit hook there
    rel = os.path.relpath(os.path.join(here, "problem.yaml"))
    subprocess.run(["sh", "-c", f"echo '# owned' >> {rel}"])
    return _p2p_sum(x)
""",
}


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    problems, solutions = make_tree(root, FAULTS)
    before = tree_digest(problems)
    t0 = time.monotonic()
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "-n", "2",
                    f"--kb-timeout={DEADLINE_S}", f"--kb-pg-timeout={PG_TIMEOUT_S}", "--kb-keep-jobs",
                    timeout=600, env={"KB_LOG_LIMIT_BYTES": str(LOG_CAP)})
    assert doc is not None, proc.stdout[-5000:] + proc.stderr[-5000:]
    return {"proc": proc, "doc": doc, "items": by_problem(doc), "root": root, "problems": problems,
            "before": before, "wall": time.monotonic() - t0}


def item(faults, name):
    return faults["items"][f"collective/{name}"]


def test_control_passes(faults):
    assert item(faults, "honest_faults_control")["outcome"] == "passed"


def test_spin_forever_hits_the_deadline_naming_ranks_and_phase(faults):
    it = item(faults, "spin_forever")
    assert it["failure"] == "timeout", it["message"]
    assert it["wall_s"] < DEADLINE_S + 15
    for rank in (0, 1):
        assert f"rank {rank}: size tiny, trial 1, candidate call" in it["message"]


def test_skipped_collective_surfaces_in_seconds(faults):
    # (the collective is also a forbidden one in this problem: that category may come first)
    it = item(faults, "skips_collective")
    # a rank left in a collective its peer skipped is a hang (timeout, issue 45), named with both ranks
    assert it["outcome"] == "failed" and it["failure"] in ("timeout", "runtime_error", "crash", "forbidden_call"), \
        it["message"]
    assert it["wall_s"] < DEADLINE_S - 5, f"took {it['wall_s']:.1f} s: the process-group timeout did not fire"
    assert "rank 0" in it["message"] and "rank 1" in it["message"]


def test_segfault_is_a_crash_naming_the_signal(faults):
    it = item(faults, "segfault_rank1")
    assert it["failure"] == "crash", it["message"]
    assert "rank 1" in it["message"] and "SIGSEGV" in it["message"]


def test_exit_on_one_rank_is_a_crash(faults):
    it = item(faults, "exit1_rank1")
    assert it["failure"] == "crash", it["message"]
    assert "rank 1" in it["message"] and "exit code 1" in it["message"]


def test_out_of_memory_is_a_runtime_error_about_memory(faults):
    it = item(faults, "out_of_memory")
    assert it["failure"] == "runtime_error", it["message"]
    assert "memory" in it["message"].lower() or "allocat" in it["message"].lower()


def test_flood_of_output_is_truncated_and_the_run_survives(faults):
    it = item(faults, "floods_stdout")
    assert it["outcome"] == "passed", it["message"]
    assert "log truncated" in it["message"]
    from pathlib import Path
    for log in Path(it["job_dir"], "logs").glob("rank*.log"):
        assert log.stat().st_size < 64 * LOG_CAP, (log, log.stat().st_size)


def test_children_and_daemons_fail_the_item_and_are_killed(faults):
    """Child processes may run while the candidate is imported and in its first call (builds); one
    still alive in a later call fails the item, and nothing of them survives the job."""
    it = item(faults, "spawns_children")
    assert it["failure"] == "forbidden_call" and "still alive after the call" in it["message"], it["message"]
    assert not processes_with(SLEEP_CHILD) and not processes_with(SLEEP_DAEMON)


def test_writing_the_problem_tree_is_refused_reported_and_undone(faults):
    it = item(faults, "writes_problem_tree")
    if "mountns" in (it.get("isolation") or []) and it["outcome"] == "passed":
        # the tree lies under a folder closed to the candidate's uid (pytest's 0700 temporary
        # folder): its mount namespace shows only its own folders there, so there is nothing to try
        assert "KBPROBE refused: FileNotFoundError" in rank_logs(it)
    else:
        assert it["failure"] == "forbidden_call", it["message"]
        assert "KBPROBE refused: PermissionError" in rank_logs(it)
    assert tree_digest(faults["problems"]) == faults["before"]


def test_nothing_left_behind(faults):
    assert not leftover_processes(str(faults["root"]))
    assert set(faults["items"]) == {f"collective/{n}" for n in FAULTS}
