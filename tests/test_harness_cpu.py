"""End to end on CPU (gloo): the real plugin, torchrun and worker judge bad candidates.

One pytest run evaluates every candidate below (each as a copy of the all_reduce problem), then
each test reads what the report says about its item.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from pytest_kernelbench.protocol import JobLayout

from kbrun import by_problem, explain, leftover_processes, make_tree, run

pytestmark = pytest.mark.e2e      # every test here runs an inner pytest or ranks (tests/e2e_guard.py)

TIMEOUT_S = 20     # a loaded 2-core machine must still run the honest items inside it

CANDIDATES = {
    "good": """
import torch.distributed as dist
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out
""",
    "hangs": """
import time
import torch.distributed as dist
_calls = 0
def solution(x):
    global _calls
    _calls += 1
    if _calls == 1:      # the first call is setup, which may compile as long as the compile budget
        out = x.clone()
        dist.all_reduce(out)
        return out
    while True:          # then every rank waits forever on a flag nobody sets
        time.sleep(0.01)
""",
    "raises_on_rank1": """
import torch.distributed as dist
def solution(x):
    if dist.get_rank() == 1:
        raise ValueError("boom from rank 1")
    out = x.clone()
    dist.all_reduce(out)
    return out
""",
    "exits_on_rank1": """
import os
import torch.distributed as dist
def solution(x):
    if dist.get_rank() == 1:
        os._exit(7)
    out = x.clone()
    dist.all_reduce(out)
    return out
""",
    "wrong_on_rank1": """
import torch.distributed as dist
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    if dist.get_rank() == 1:
        out[5] += 3.0
    return out
""",
    "caches_first": """
import torch.distributed as dist
_first = None
def solution(x):
    global _first
    if _first is None:
        _first = x.clone()
        dist.all_reduce(_first)
    return _first.clone()
""",
    "mutates_input": """
import torch.distributed as dist
def solution(x):
    dist.all_reduce(x)
    return x.clone()
""",
    "syntax_error": "def solution(x)\n    return x\n",
    # torch's symmetric-memory rendezvous (CUDA): each process binds $TMPDIR/symm_mem-<its pid> and
    # sends a handle to a peer's socket, its path built from its OWN TMPDIR and the peer's pid
    "peer_socket": """
import os
import socket
import torch.distributed as dist
_met = False
def solution(x):
    global _met
    if not _met:
        me = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        me.bind(os.path.join(os.environ["TMPDIR"], f"kbsock-{os.getpid()}"))
        pids = [None] * dist.get_world_size()
        dist.all_gather_object(pids, os.getpid())
        peer = pids[(dist.get_rank() + 1) % len(pids)]
        me.sendto(b"hi", os.path.join(os.environ["TMPDIR"], f"kbsock-{peer}"))
        assert me.recv(16) == b"hi"
        me.close()
        _met = True
    out = x.clone()
    dist.all_reduce(out)
    return out
""",
}


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    root = tmp_path_factory.mktemp("harness")
    # these candidates call dist.all_reduce for brevity: the copies allow it (forbid is tested elsewhere)
    problems, solutions = make_tree(root, CANDIDATES, yaml_patch={"forbid": []})
    t0 = time.monotonic()
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2",
                    f"--kb-timeout={TIMEOUT_S}", "-n", "2")
    assert doc is not None, proc.stdout + proc.stderr
    return {"proc": proc, "doc": doc, "items": by_problem(doc), "root": root, "wall": time.monotonic() - t0}


def item(judged, name):
    return judged["items"][f"collective/{name}"]


def test_good_candidate_passes_with_timings(judged):
    it = item(judged, "good")
    assert it["outcome"] == "passed", explain(it)
    size = it["sizes"][0]
    assert size["name"] == "tiny" and len(size["trials"]) == 2 and all(t["ok"] for t in size["trials"])
    timing = size["timing"]
    assert len(timing["reference"]["rounds_s"]) >= 5 and timing["candidate"]["median_s"] > 0
    # gloo times are not speed: no score, no verdict, the ratio kept apart
    assert it["score"] is None and it["verdict"] is None and it["speed"] == "cpu: not a speed"
    assert size["speedup"] is None and size["cpu_time_ratio"] > 0


def test_peer_candidate_processes_reach_each_others_sockets_in_tmpdir(judged):
    """Every rank's candidate process has the same TMPDIR: torch's symmetric-memory rendezvous
    found no peer with a TMPDIR per rank ("Failed to send fd: No such file or directory", the
    first shared-GPU run of issue 46)."""
    it = item(judged, "peer_socket")
    assert it["outcome"] == "passed", explain(it)
    kept = item(judged, "raises_on_rank1")["job_dir"]     # a failed item's folder stays (a passed one's goes)
    layout = JobLayout(Path(kept))
    tmps = [layout.solver_tmp(role) for role in ("candidate", "reference")]
    assert len(str(tmps[0] / "symm_mem-4194304")) < 108       # a socket's path, whatever the report folder
    assert not any(t.exists() for t in tmps)                  # gone with the job


def test_hang_times_out_naming_rank_and_phase_and_leaves_no_process(judged):
    it = item(judged, "hangs")
    assert it["outcome"] == "failed" and it["failure"] == "timeout", explain(it)
    assert it["wall_s"] <= TIMEOUT_S + 15
    for rank in (0, 1):
        assert f"rank {rank}: size tiny, trial 1, candidate call" in it["message"]
    assert not leftover_processes(str(judged["root"]))


def test_exception_on_one_rank_is_runtime_error_with_message(judged):
    it = item(judged, "raises_on_rank1")
    assert it["failure"] == "runtime_error", explain(it)
    assert "rank 1" in it["message"] and "boom from rank 1" in it["message"]


def test_exit_on_one_rank_is_a_crash(judged):
    it = item(judged, "exits_on_rank1")
    assert it["failure"] == "crash", explain(it)
    assert "rank 1" in it["message"] and "exit code 7" in it["message"]


def test_wrong_answer_on_one_rank_is_a_mismatch_naming_rank_and_error(judged):
    it = item(judged, "wrong_on_rank1")
    assert it["failure"] == "mismatch", explain(it)
    assert "rank 1" in it["message"] and "max abs error 3" in it["message"] and "first at [5]" in it["message"]


def test_cached_first_result_is_a_mismatch(judged):
    it = item(judged, "caches_first")
    assert it["failure"] == "mismatch", explain(it)
    assert "trial 1" in it["message"]


def test_mutating_the_input_fails(judged):
    it = item(judged, "mutates_input")
    assert it["failure"] == "mismatch", explain(it)
    assert "modified" in it["message"]


def test_syntax_error_is_a_compile_error(judged):
    it = item(judged, "syntax_error")
    assert it["failure"] == "compile_error", explain(it)
    assert "SyntaxError" in it["message"]


def test_reports_hold_every_item(judged):
    doc, root = judged["doc"], judged["root"]
    assert len(doc["items"]) == len(CANDIDATES)
    jsonl = (root / "report.jsonl").read_text().splitlines()
    assert len(jsonl) == len(CANDIDATES)
    agg = doc["aggregates"]
    assert agg["total"] == len(CANDIDATES) and agg["passed"] == 2
    assert agg["failures"]["timeout"] == 1 and agg["failures"]["mismatch"] == 3
    assert doc["machine"]["cpu_count"] and doc["config"]["nonce"]
    assert "kernelbench" in judged["proc"].stdout and "collective/hangs" in judged["proc"].stdout


# ---- the same verdicts when torchrun starts the ranks (--kb-launcher=torchrun) -----------------------
UNDER_TORCHRUN = ("good", "hangs", "raises_on_rank1", "exits_on_rank1", "wrong_on_rank1", "peer_socket")


@pytest.fixture(scope="module")
def judged_torchrun(tmp_path_factory):
    root = tmp_path_factory.mktemp("harness_torchrun")
    problems, solutions = make_tree(root, {n: CANDIDATES[n] for n in UNDER_TORCHRUN}, yaml_patch={"forbid": []})
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-launcher=torchrun",
                    f"--kb-timeout={TIMEOUT_S}", "-n", "2")
    assert doc is not None, proc.stdout + proc.stderr
    return {"items": by_problem(doc), "root": root, "doc": doc}


def test_fork_and_torchrun_launchers_give_the_same_verdicts(judged, judged_torchrun):
    assert judged["doc"]["config"]["settings"]["launcher"] == "fork"
    assert judged_torchrun["doc"]["config"]["settings"]["launcher"] == "torchrun"
    for name in UNDER_TORCHRUN:
        fork, torchrun = item(judged, name), item(judged_torchrun, name)
        assert (fork["outcome"], fork["failure"]) == (torchrun["outcome"], torchrun["failure"]), \
            f"{name}\nfork: {explain(fork)}\ntorchrun: {explain(torchrun)}"
        first = lambda m: (m or "").split("(")[0].split(":")[0]    # noqa: E731 - who and what, not the details
        assert first(fork["message"]) == first(torchrun["message"]), (fork["message"], torchrun["message"])
    assert "exit code 7" in item(judged_torchrun, "exits_on_rank1")["message"]
    assert not leftover_processes(str(judged_torchrun["root"]))
