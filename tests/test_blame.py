"""Run integrity (issue 11, items 5 and 10): a hang is blamed on the rank that stopped progressing,
a slow first call (a JIT compile while the peers wait in a barrier) is not killed by the short
process-group timeout, a reused output buffer is diagnosed as such, and C++ frame dumps never
reach a log excerpt. The end-to-end tests run the real plugin on CPU (gloo, 2 ranks) at the
default process-group timeout (20 s); the unit tests build job folders by hand."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from cheats.cheatlib import HONEST
from kbrun import by_problem, leftover_processes, make_tree, run

from pytest_kernelbench import outcome
from pytest_kernelbench.launch import torchrun as torchrun_launcher
from pytest_kernelbench.outcome.logs import drop_cpp_frames, logs_tail
from pytest_kernelbench.protocol import JobLayout

DEADLINE_S = 20

CANDIDATES = {
    # rank 0 never returns from its 2nd call (trial 1); rank 1 goes on to the reference's collective
    "hang_rank0_trial1": HONEST + """
import time
_calls = 0
def solution(x):
    global _calls
    _calls += 1
    out = _p2p_sum(x)
    if _calls == 2 and dist.get_rank() == 0:
        while True:
            time.sleep(1)
    return out
""",
    # rank 0 "compiles" for 30 s in its first call (a child process burning CPU, as a compiler does)
    # while rank 1 waits in a barrier (allowed: the first call of a size is setup); longer than
    # both the deadline and the process-group timeout
    "slow_first_call": HONEST + """
import subprocess, sys
_first = True
def solution(x):
    global _first
    if _first:
        _first = False
        if dist.get_rank() == 0:
            subprocess.run([sys.executable, "-c", "import time\\nt = time.time()\\nwhile time.time() - t < 30: pass"])
        dist.barrier()
    return _p2p_sum(x)
""",
}

COMPILE_BUDGET_S = 10

BUDGET = {
    # one module-level output buffer, filled in place on every call: caught in the trials
    "reused_output_buffer": HONEST + """
_buf = None
def solution(x):
    global _buf
    s = _p2p_sum(x)
    if _buf is None:
        _buf = torch.empty_like(s)
    _buf.copy_(s)
    return _buf
""",
    # fresh outputs in the two trials, one reused buffer from then on: caught after timing
    "reused_after_trials": HONEST + """
_buf = None
_calls = 0
def solution(x):
    global _buf, _calls
    _calls += 1
    s = _p2p_sum(x)
    if _calls <= 2:
        return s
    if _buf is None:
        _buf = torch.empty_like(s)
    _buf.copy_(s)
    return _buf
""",
    # a first call that never ends and shows no compile activity (no compiler, no build files): it
    # meets the deadline, naming the rank that never finished while its peer waited in a barrier
    "first_call_hang": HONEST + """
import time
_first = True
def solution(x):
    global _first
    if _first:
        _first = False
        if dist.get_rank() == 0:
            while True:
                time.sleep(1)
        dist.barrier()
    return _p2p_sum(x)
""",
}


@pytest.fixture(scope="module")
def hangs(tmp_path_factory):
    root = tmp_path_factory.mktemp("blame")
    problems, solutions = make_tree(root, CANDIDATES)
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "-n", "2",
                    f"--kb-timeout={DEADLINE_S}", "--kb-timing=off", "--kb-keep-jobs", timeout=600)
    assert doc is not None, proc.stdout[-5000:] + proc.stderr[-5000:]
    return {"items": by_problem(doc), "root": root}


@pytest.mark.e2e
def test_one_rank_hang_after_the_first_call_names_that_rank(hangs):
    it = hangs["items"]["collective/hang_rank0_trial1"]
    assert it["failure"] == "timeout", it["message"]
    assert it["message"].startswith('rank 0 stopped progressing in "size tiny, trial 1, candidate call"'), it["message"]
    assert "the reference failed" not in it["message"].split("(")[0], it["message"]
    assert "rank 1: size tiny, trial 1, reference call" in it["message"], it["message"]
    assert it["wall_s"] - it["compile_s"] < DEADLINE_S + 15, (it["wall_s"], it["compile_s"])
    assert it["wall_s"] < DEADLINE_S + 15 + 10, it["wall_s"]


@pytest.mark.e2e
def test_slow_first_call_gets_the_compile_budget(hangs):
    it = hangs["items"]["collective/slow_first_call"]
    assert it["outcome"] == "passed", (it["failure"], it["message"], it.get("log_tail"))
    assert it["compile_s"] >= 25, it["compile_s"]    # the slow first call was not counted in the deadline


@pytest.mark.e2e
def test_nothing_left_behind(hangs):
    assert not leftover_processes(str(hangs["root"]))


@pytest.fixture(scope="module")
def budget(tmp_path_factory):
    root = tmp_path_factory.mktemp("budget")
    problems, solutions = make_tree(root, BUDGET)
    # timing on (the check after timing needs it), at its minimum
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "-n", "2",
                    f"--kb-timeout={DEADLINE_S}", f"--kb-compile-timeout={COMPILE_BUDGET_S}",
                    "--kb-timing-rounds=6", timeout=600)
    assert doc is not None, proc.stdout[-5000:] + proc.stderr[-5000:]
    return {"items": by_problem(doc), "root": root}


@pytest.mark.parametrize("name, where", [("reused_output_buffer", "size tiny, trial 1"),
                                         ("reused_after_trials", "size tiny, timing")])
@pytest.mark.e2e
def test_reused_output_buffer_is_diagnosed(budget, name, where):
    it = budget["items"][f"collective/{name}"]
    assert it["failure"] == "mismatch", it["message"]
    assert "outputs of different calls share storage" in it["message"], it["message"]
    assert where in it["message"], it["message"]


@pytest.mark.e2e
def test_first_call_hang_meets_the_deadline_naming_the_rank(budget):
    it = budget["items"]["collective/first_call_hang"]
    assert it["failure"] == "timeout", it["message"]
    assert it["message"].startswith(
        'rank 0 stopped progressing in "size tiny, trial 0, candidate call (first call: setup/compile)"'), it["message"]
    assert f"deadline of {DEADLINE_S} s passed" in it["message"] and "rank 1: " in it["message"], it["message"]
    assert it["wall_s"] < DEADLINE_S + 15, it["wall_s"]
    assert not leftover_processes(str(budget["root"]))


# ---- unit tests: no torchrun --------------------------------------------------------------------

NCCL_DUMP = """\
[rank1]:[E ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=20000) ran for 20005 milliseconds before timing out.
Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:635 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f1 in /usr/lib/libc10.so)
frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x23d (0x7f2 in libtorch_cuda.so)
frame #12: <unknown function> + 0x94ac3 (0x7f3 in /lib/x86_64-linux-gnu/libc.so.6)
#0 0x00007f3a in __pthread_kill_implementation () from /lib/libc.so.6
#1  0x00007f3b in raise () from /lib/libc.so.6
Fatal Python error: Aborted
"""


def test_cpp_frames_are_dropped_from_log_excerpts():
    kept = drop_cpp_frames(NCCL_DUMP)
    assert "Watchdog caught collective operation timeout" in kept
    assert "Fatal Python error: Aborted" in kept
    assert "frame #" not in kept and "Exception raised from" not in kept and "0x00007f3" not in kept
    assert "[3 C++ stack frame lines dropped]" in kept or "C++ stack frame" in kept
    # ordinary text, Python tracebacks and a '#' comment survive
    text = 'Traceback (most recent call last):\n  File "x.py", line 3, in f\n# note\nRuntimeError: boom\n'
    assert drop_cpp_frames(text) == text


def _job(tmp: Path, phases: dict, errors: dict = (), logs: dict = (), torchrun: str = "") -> Path:
    for sub in ("hb", "error", "logs", "done"):
        (tmp / sub).mkdir(parents=True, exist_ok=True)
    now = time.time()
    for r, (age, phase) in phases.items():
        (tmp / "hb" / f"rank{r}").write_text(f"{now - age:.3f} {phase}\n")
    for r, (where, message) in dict(errors).items():
        (tmp / "error" / f"rank{r}.json").write_text(json.dumps(
            {"rank": r, "category": "runtime_error", "message": message, "where": where, "traceback": "", "time": now}))
    for r, text in dict(logs).items():
        (tmp / "logs" / f"rank{r}.log").write_text(text)
    (tmp / "logs" / "torchrun.log").write_text(torchrun)
    # what the torchrun launcher writes from its failure summary after the job (launch/torchrun.py)
    torchrun_launcher.exit_facts(torchrun, len(phases), None).write(JobLayout(tmp).exits)
    return tmp


def _summary(*exits) -> str:
    return "Failures:\n" + "".join(f"  rank      : {r} (local_rank: {r})\n  exitcode  : {c} (pid: {100 + r})\n"
                                   for r, c in exits)


GLOO_TIMEOUT = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
                "20000ms for recv operation to complete")


def test_blame_peer_timed_out_waiting_for_a_stopped_rank(tmp_path):
    job = _job(tmp_path, {0: (25, "size tiny, trial 1, candidate call"), 1: (20, "size tiny, trial 1, reference call")},
               errors={1: ("reference", f"the reference failed (size tiny, trial 1): {GLOO_TIMEOUT}")},
               torchrun=_summary((1, 3), (0, -15)))
    out = outcome.classify(job, "t", 2, 1)
    assert out.category == "timeout", out.message
    assert out.message.startswith('rank 0 stopped progressing in "size tiny, trial 1, candidate call"'), out.message
    assert "its peers timed out waiting for it: rank 1: size tiny, trial 1, reference call" in out.message
    assert "Timed out waiting" in out.message


def test_blame_a_raising_rank_stays_a_runtime_error(tmp_path):
    # rank 0 raised in its candidate; rank 1 then lost the connection: rank 0's error is the cause
    job = _job(tmp_path, {0: (5, "size tiny, trial 0, candidate call"), 1: (5, "size tiny, trial 0, reference call")},
               errors={0: ("candidate", "size tiny, trial 0: ValueError: bad"),
                       1: ("reference", "the reference failed (size tiny, trial 0): RuntimeError: Connection closed by peer")},
               torchrun=_summary((0, 3), (1, 3)))
    out = outcome.classify(job, "t", 2, 1)
    assert out.category == "runtime_error" and out.message.startswith("rank 0: size tiny, trial 0: ValueError"), out.message


def test_blame_nccl_watchdog_abort_names_the_stopped_rank(tmp_path):
    # NCCL: the waiting rank is aborted by the watchdog (SIGABRT, no Python error); the rank it
    # waited for was stopped by torchrun
    job = _job(tmp_path, {0: (30, "size tiny, trial 0, candidate call (first call: setup/compile)"),
                          1: (25, "size tiny, trial 0, candidate call (first call: setup/compile)")},
               logs={1: NCCL_DUMP}, torchrun=_summary((1, -6), (0, -15)))
    out = outcome.classify(job, "t", 2, 1)
    assert out.category == "timeout", out.message
    assert out.message.startswith('rank 0 stopped progressing in "size tiny, trial 0, candidate call'), out.message
    assert "rank 1" in out.message and "collective operation timeout" in out.message
    assert "frame #" not in out.log_tail


def test_blame_signal_death_names_rank_phase_and_watchdog(tmp_path):
    # rank 1 aborted by the watchdog, and no peer was stopped behind it (all died): a crash that
    # says rank 1 timed out waiting for peers, and where the peers were
    job = _job(tmp_path, {0: (30, "size tiny, trial 1, candidate call"), 1: (25, "size tiny, trial 1, reference call")},
               logs={1: NCCL_DUMP}, torchrun=_summary((1, -6), (0, -6)))
    out = outcome.classify(job, "t", 2, 1)
    assert out.category in ("timeout", "crash"), out.message
    assert "rank 0" in out.message and "candidate call" in out.message, out.message
    assert "frame #" not in out.log_tail and "frame #" not in out.message


def test_blame_segfault_stays_a_crash_with_its_phase(tmp_path):
    job = _job(tmp_path, {0: (3, "size tiny, trial 0, reference call"), 1: (3, "size tiny, trial 0, candidate call")},
               errors={0: ("reference", "the reference failed (size tiny, trial 0): RuntimeError: Connection closed by peer")},
               torchrun=_summary((1, -11), (0, 3)))
    out = outcome.classify(job, "t", 2, 1)
    assert out.category == "crash", out.message
    assert out.message.startswith("rank 1 died (signal SIGSEGV)"), out.message
    assert "size tiny, trial 0, candidate call" in out.message


def test_deadline_blames_the_rank_that_stopped(tmp_path):
    phases = {0: "size tiny, trial 1, candidate call", 1: "size tiny, trial 1, reference call"}
    job = _job(tmp_path, {0: (18, phases[0]), 1: (17, phases[1])})
    msg = outcome.deadline_message("deadline of 20 s passed", job, outcome.read_phases(job))
    assert msg.startswith('rank 0 stopped progressing in "size tiny, trial 1, candidate call"'), msg
    assert "deadline of 20 s passed" in msg and "rank 1: size tiny, trial 1, reference call" in msg
    # every rank in the same phase (all spin in the candidate): no single rank is blamed
    job2 = _job(tmp_path / "b", {0: (18, phases[0]), 1: (18, phases[0])})
    msg2 = outcome.deadline_message("deadline of 20 s passed", job2, outcome.read_phases(job2))
    assert "stopped progressing" not in msg2 and f"rank 0: {phases[0]}; rank 1: {phases[0]}" in msg2


def _dump(*frames) -> str:
    """A faulthandler dump (what a rank writes to its log when SIGTERM stops it), innermost first."""
    return "Current thread 0x00007f38f2e07b80 (most recent call first):\n" + "".join(
        f'  File "{f}", line {n} in {fn}\n' for f, n, fn in frames)


def test_deadline_uses_the_stack_dumps_when_phases_are_alike(tmp_path):
    # both ranks "in the candidate call", but rank 1's stack shows it waiting in torch.distributed
    cand = tmp_path / "candidate" / "solution.py"
    cand.parent.mkdir()
    cand.write_text("import time\nimport torch.distributed as dist\ndef solution(x):\n"
                    "    time.sleep(100)\n    dist.barrier()\n")
    harness = ("/x/pytest_kernelbench/rank/candidate.py", 200, "run_batch")
    phase = "size tiny, trial 0, candidate call (first call: setup/compile)"
    job = _job(tmp_path, {0: (12, phase), 1: (12, phase)}, logs={
        0: "noise\n" + _dump((str(cand), 4, "solution"), harness),
        1: _dump(("/v/torch/distributed/distributed_c10d.py", 5356, "barrier"), (str(cand), 5, "solution"), harness)})
    msg = outcome.deadline_message("budget spent", job, outcome.read_phases(job), str(cand))
    assert msg.startswith(f'rank 0 stopped progressing in "{phase}", at solution.py line 4 in solution(): '
                          "time.sleep(100)"), msg
    assert "rank 1: " in msg and "line 5 in solution(): dist.barrier(), waiting in torch.distributed" in msg, msg
    # rank 1's dump went missing (stopped before it was written): rank 0's dump still names rank 0 alone
    job2 = _job(tmp_path / "b", {0: (12, phase), 1: (12, phase)}, logs={0: _dump((str(cand), 4, "solution"), harness),
                                                                       1: "no dump\n"})
    msg2 = outcome.deadline_message("budget spent", job2, outcome.read_phases(job2), str(cand))
    assert msg2.startswith(f'rank 0 stopped progressing in "{phase}", at solution.py line 4'), msg2
    assert f"rank 1: {phase}" in msg2, msg2
    # in a log excerpt the harness's frames of the dump are folded away
    tail = logs_tail(job)
    assert "pytest_kernelbench" not in tail and "[1 harness frame]" in tail and "distributed_c10d.py" in tail


GLOO_CLOSED = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
               "[127.0.0.1]:50923. This is typically caused by a remote worker crashing.")


def test_a_peers_closed_connection_never_leads(tmp_path):
    """Rank 1 stops sending and waits in its own recv; ranks 0 and 2 returned from their calls and
    time out in the reference's collective; rank 3's call loses its connection when a peer ends.
    Every error only says a rank waited in vain: the rank still in its call leads (`timeout`), with
    where it waited, and the closed connection is never first (before: rank 3's, as a runtime_error)."""
    cand = tmp_path / "candidate" / "solution.py"
    cand.parent.mkdir(parents=True)
    cand.write_text("import torch.distributed as dist\ndef solution(x, buf):\n    dist.recv(buf, 0, tag=7)\n")
    harness = ("/x/pytest_kernelbench/rank/candidate.py", 188, "run_batch")
    call, ref = "size tiny, trial 1, candidate call", "size tiny, trial 1, reference call"
    closed = {"rank": 3, "category": "runtime_error", "where": "candidate", "time": time.time() - 5,
              "message": f"size tiny, trial 1: {GLOO_CLOSED}", "traceback": GLOO_CLOSED}
    job = _job(tmp_path, {0: (25, ref), 1: (25, call), 2: (25, ref), 3: (25, call)},
               errors={0: ("reference", f"the reference failed ({ref}): {GLOO_TIMEOUT}"),
                       2: ("reference", f"the reference failed ({ref}): {GLOO_TIMEOUT}")},
               logs={1: _dump(("/v/torch/distributed/distributed_c10d.py", 2799, "recv"), (str(cand), 3, "solution"),
                              harness)},
               torchrun=_summary((0, 3), (2, 3), (3, 3), (1, -15)))
    (job / "error" / "rank3.json").write_text(json.dumps(closed))
    out = outcome.classify(job, "t", 4, 1, candidate_path=str(cand))
    assert out.category == "timeout", out.message
    assert out.message.startswith(f'rank 1 stopped progressing in "{call}", at solution.py line 3 in solution(): '
                                  "dist.recv(buf, 0, tag=7), waiting in torch.distributed"), out.message
    assert out.message.index("rank 0: ") < out.message.index("Connection closed by peer"), out.message
    # as a run left it (4 ranks on gloo): no rank stopped silently; the culprit's own wait ended by a
    # peer's closed connection, its peers (back in the harness) timed out: the culprit still leads
    (job / "error" / "rank1.json").write_text(json.dumps({**closed, "rank": 1, "traceback": (
        f'Traceback (most recent call last):\n  File "{cand}", line 3, in solution\n    dist.recv(buf, 0, tag=7)\n'
        '  File "/v/torch/distributed/distributed_c10d.py", line 2799, in recv\n    work.wait()\n' + GLOO_CLOSED)}))
    (job / "logs" / "rank1.log").write_text("")
    (job / "hb" / "rank3").write_text(f"{time.time() - 25:.3f} {ref}\n")
    (job / "error" / "rank3.json").write_text(json.dumps({**closed, "where": "reference", "message": (
        f"the reference failed ({ref}): {GLOO_TIMEOUT}"), "traceback": ""}))
    out = outcome.classify(job, "t", 4, 1, candidate_path=str(cand))
    assert out.category == "timeout", out.message
    assert out.message.startswith(f'rank 1 stopped progressing in "{call}", at solution.py line 3 in solution(): '
                                  "dist.recv(buf, 0, tag=7), waiting in torch.distributed (its peers timed out"), \
        out.message
    assert "Connection closed by peer" in out.message.split("rank 3: ")[1], out.message
