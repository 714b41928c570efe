"""The rank server (rankserver.py, rank/zygote.py): ranks forked from a process that has imported
torch. A candidate can reach that process (it is its rank's parent): killing it, stopping it or
writing forged requests into its stdin must fail at most the candidate's own item, never a later
one, and leave nothing behind. One pytest run (no xdist: one zygote, items in name order)."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from kbrun import RING, by_problem, explain, leftover_processes, make_tree, run

sys.path.insert(0, str(__import__("kbrun").REPO))
from pytest_kernelbench import launch  # noqa: E402
from pytest_kernelbench.launch.fork import RankServerError  # noqa: E402

TIMEOUT_S = 20     # a loaded 2-core machine must still run the honest items inside it

# the zygote forks each checker; the candidate process is the checker's child
ZYGOTE = """
def _zygote():
    with open(f"/proc/{os.getppid()}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])
"""

FORGES = """
import json, os
import torch.distributed as dist
""" + ZYGOTE + """
def solution(x):
    # write into the rank server's stdin: a spawn request without its secret, then a partial line
    # meant to swallow the launcher's next request
    try:
        with open(f"/proc/{_zygote()}/fd/0", "wb", buffering=0) as pipe:
            pipe.write(json.dumps({"op": "spawn", "id": 99, "job_dir": "/nonexistent", "env": {},
                                   "cwd": "/", "log": os.environ["KB_FORGED_MARK"]}).encode() + b"\\n")
            pipe.write(b'{"op": "spawn", "junk": "')
    except OSError as e:
        print("KBPROBE refused", e)
    out = x.clone()
    dist.all_reduce(out)
    return out
"""

KILLS = """
import os, signal
import torch.distributed as dist
""" + ZYGOTE + """
def solution(x):
    if dist.get_rank() == 0:
        try:
            os.kill(_zygote(), signal.SIGKILL)      # the zygote, which forked this rank's checker
        except OSError as e:
            print("KBPROBE refused", e)
    out = x.clone()
    dist.all_reduce(out)
    return out
"""

STOPS = """
import os, signal
import torch.distributed as dist
_done = [False]
""" + ZYGOTE + """
def solution(x):
    if dist.get_rank() == 0 and not _done[0]:
        _done[0] = True
        try:
            os.kill(_zygote(), signal.SIGSTOP)      # the zygote stops answering
        except OSError as e:
            print("KBPROBE refused", e)
    out = x.clone()
    dist.all_reduce(out)
    return out
"""

GOOD = """
import torch.distributed as dist

def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out
"""


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    root = tmp_path_factory.mktemp("rankserver")
    mark = root / "forged.log"
    problems, solutions = make_tree(root, {"a_forges": FORGES, "b_good": GOOD, "c_kills_zygote": KILLS,
                                           "d_good": RING, "e_stops_zygote": STOPS, "f_good": GOOD},
                                    yaml_patch={"forbid": []})
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "-p", "no:xdist",
                    f"--kb-timeout={TIMEOUT_S}", "--kb-timing=off", env={"KB_FORGED_MARK": str(mark)})
    assert doc is not None, proc.stdout + proc.stderr
    return {"items": by_problem(doc), "root": root, "mark": mark, "doc": doc}


@pytest.mark.e2e
def test_forged_requests_are_ignored_and_the_next_item_runs(attacked):
    items = attacked["items"]
    assert items["collective/a_forges"]["outcome"] == "passed", explain(items["collective/a_forges"])
    assert not attacked["mark"].exists()        # the forged spawn never ran
    assert items["collective/b_good"]["outcome"] == "passed", explain(items["collective/b_good"])


def _scoped(it: dict) -> bool:
    """The candidate could not signal outside its sandbox (Landlock ABI >= 6)."""
    return "signal-scope" in (it.get("isolation") or [])


@pytest.mark.e2e
def test_killing_the_zygote_fails_at_most_that_item(attacked):
    """Where the kernel scopes signals, the kill is refused and the item passes; elsewhere the
    candidate kills the zygote and fails only its own item. The next item passes either way."""
    items = attacked["items"]
    it = items["collective/c_kills_zygote"]
    if _scoped(it):
        assert it["outcome"] == "passed", explain(it)
    else:
        assert it["outcome"] == "failed" and it["failure"] in ("crash", "runtime_error"), explain(it)
    assert items["collective/d_good"]["outcome"] == "passed", explain(items["collective/d_good"])


@pytest.mark.e2e
def test_stopping_the_zygote_fails_at_most_that_item(attacked):
    items = attacked["items"]
    it = items["collective/e_stops_zygote"]
    if _scoped(it):
        assert it["outcome"] == "passed", explain(it)
    else:
        assert it["outcome"] == "failed" and it["failure"] == "timeout", explain(it)
    assert items["collective/f_good"]["outcome"] == "passed", explain(items["collective/f_good"])


@pytest.mark.e2e
def test_every_item_ran_in_a_forked_rank_and_nothing_is_left(attacked):
    assert attacked["doc"]["config"]["settings"]["launcher"] == "fork"
    assert not leftover_processes(str(attacked["root"]))


@pytest.mark.e2e
def test_zygote_start_failure_is_a_clear_error(tmp_path):
    """A broken torch install: the zygote dies importing it, and the error says why."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('this torch is broken')\n")
    server = launch.rank_server()
    server.env = {**server.env, "PYTHONPATH": f"{tmp_path}:{server.env['PYTHONPATH']}"}
    try:
        with pytest.raises(RankServerError, match="rank server exited.*this torch is broken"):
            server.start()
            server.ready(timeout=60)
    finally:
        server.close()


@pytest.mark.e2e
def test_zygote_answers_and_drops_lines_without_its_secret():
    server = launch.rank_server()
    try:
        server.start()
        server.ready()
        assert server.proc is not None and server.proc.stdin is not None
        server.proc.stdin.write(b'{"op": "ping", "id": "forged", "secret": "guess"}\n')
        assert server.check()       # answers its own ping; the forged one got no reply
        time.sleep(0.2)
        assert server._replies.empty()
    finally:
        server.close()
    assert server.proc is None


@pytest.mark.e2e
def test_zygote_leaves_when_its_launcher_closes_the_pipe():
    server = launch.rank_server()
    server.start()
    server.ready()
    proc = server.proc
    assert proc is not None and proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0
    server.proc = None


@pytest.mark.e2e
def test_exit_summary_has_torchruns_facts(tmp_path):
    """exits.json (every launcher's format) holds what torchrun's failure summary says: non-zero
    exits and the first failure; the fork launcher's and the torchrun launcher's read alike."""
    from pytest_kernelbench.launch import torchrun
    from pytest_kernelbench.protocol import ExitFacts
    path = tmp_path / "exits.json"
    ExitFacts("fork", exits={0: -15, 1: 7, 2: 0}, root_cause=1).write(path)
    fork = ExitFacts.read(path)
    assert fork is not None and (fork.failed(), fork.root_cause) == ({0: -15, 1: 7}, 1)
    summary = ("Failures:\n[1]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : -15 (pid: 2)\n"
               "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : 7 (pid: 3)\n")
    torchrun.exit_facts(summary, 3, 1).write(path)
    parsed = ExitFacts.read(path)
    assert parsed is not None and (parsed.failed(), parsed.root_cause) == ({0: -15, 1: 7}, 1)


@pytest.mark.e2e
def test_unknown_launcher_is_a_usage_error(tmp_path):
    from kbrun import inner_env, plugin_args
    proc = subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "--kb-launcher=mpirun", "--co", "-q"],
                          cwd=tmp_path, capture_output=True, text=True, env=inner_env())
    assert proc.returncode == 4 and "--kb-launcher='mpirun': expected fork, slurm or torchrun" in proc.stderr


# a zygote whose loop would sleep 30 s between polls: a rank's exit is reported at once only
# through its SIGCHLD wake-up; its ranks report what they inherited and leave at once
WAKE_ZYGOTE = """
import json, os, signal, sys
from pytest_kernelbench.rank import entry, zygote
OUT = sys.argv[1]       # a rank's own argv is its job folder
def main(argv):
    fds = {}
    for n in os.listdir("/proc/self/fd"):
        try:
            fds[n] = os.readlink(f"/proc/self/fd/{n}")
        except OSError:     # the listing's own descriptor, closed by now
            pass
    with open(OUT, "w") as f:
        json.dump({"fds": fds, "sigchld": signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL,
                   "wakeup": signal.set_wakeup_fd(-1)}, f)
    os._exit(0)
entry.main = main
zygote.IDLE_S = 30.0
zygote.serve()
"""


@pytest.mark.e2e
def test_a_ranks_exit_reaches_the_launcher_at_once_and_ranks_inherit_no_wakeup(tmp_path):
    import json
    out = tmp_path / "rank.json"
    proc = subprocess.Popen([sys.executable, "-c", WAKE_ZYGOTE, str(out)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, cwd=str(tmp_path), env={**launch.rank_server().env})
    try:
        assert proc.stdin is not None and proc.stdout is not None

        def say(msg: dict) -> None:
            proc.stdin.write((json.dumps(msg) + "\n").encode())
            proc.stdin.flush()
        say({"secret": "s"})
        assert "ready" in json.loads(proc.stdout.readline())
        say({"secret": "s", "op": "spawn", "id": 1, "job_dir": str(tmp_path), "env": {"PATH": "/usr/bin:/bin"},
             "cwd": str(tmp_path), "log": str(tmp_path / "rank.log")})
        pid = json.loads(proc.stdout.readline())["pid"]
        t0 = time.monotonic()
        exit_msg = json.loads(proc.stdout.readline())
        took = time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait()
    assert exit_msg == {"exit": pid, "code": 0}
    assert took < 10, f"the exit was reported after {took:.1f} s: the loop slept instead of waking on SIGCHLD"
    seen = json.loads(out.read_text())
    assert seen["sigchld"] and seen["wakeup"] == -1, seen
    assert not [t for t in seen["fds"].values() if t.startswith("pipe:")], seen["fds"]
