"""Launchers as strategies (issue 25): the built-in fork and torchrun launchers satisfy
launch/base.py's protocol and write one exits.json format (a crashing rank named with its exit
code either way), a conftest's launcher chosen through the pytest_kb_make_launcher hook runs items
end to end, and an unknown --kb-launcher is a one-line usage error naming the known ones."""
from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from kbrun import by_problem, explain, inner_env, leftover_processes, make_tree, plugin_args, run

from pytest_kernelbench import outcome
from pytest_kernelbench.launch import registry
from pytest_kernelbench.launch.base import Launcher
from pytest_kernelbench.launch.fork import ForkedRanks, ForkLauncher
from pytest_kernelbench.launch.torchrun import TorchrunLauncher, TorchrunRanks
from pytest_kernelbench.launch.slurm import SlurmLauncher, SlurmRanks
from pytest_kernelbench.protocol import ExitFacts, JobLayout
from test_harness_cpu import CANDIDATES as HARNESS_CANDIDATES

# the harness tests' candidates (one source for every launcher's tests): an honest one and one
# whose rank 1 exits 7 without a word
CANDIDATES = {name: HARNESS_CANDIDATES[name] for name in ("good", "exits_on_rank1")}

# a launcher of the user's own: the fork launcher, wrapped so that it records every job it starts
CONFTEST = '''
from pathlib import Path
from pytest_kernelbench.launch.fork import ForkLauncher

RECORD = Path(__file__).resolve().parent.parent / "started.txt"


class RecordingLauncher(ForkLauncher):
    name = "recording"

    def start(self, job_dir, nproc, env, cwd):
        with open(RECORD, "a") as f:
            f.write(f"{job_dir} {nproc}\\n")
        return super().start(job_dir, nproc, env, cwd)


def pytest_kb_make_launcher(config, name):
    return RecordingLauncher() if name == "recording" else None
'''


def test_the_built_in_launchers_are_registered_and_satisfy_the_protocol():
    assert isinstance(registry.make("fork"), ForkLauncher) and isinstance(registry.make("torchrun"), TorchrunLauncher)
    assert isinstance(registry.make("slurm"), SlurmLauncher)
    assert registry.make("mpirun") is None
    for cls in (ForkLauncher, TorchrunLauncher, SlurmLauncher):
        assert isinstance(cls(), Launcher), cls
    for ranks in (ForkedRanks, TorchrunRanks, SlurmRanks):    # the attributes every Ranks answers, on the class
        missing = [m for m in ("poll", "wait", "terminate", "roots", "spared", "is_checker", "hand_over", "finish",
                               "write_exits") if not callable(getattr(ranks, m, None))]
        assert not missing and isinstance(ranks.agent, bool), (ranks, missing)


def _launched(tmp_path_factory, name: str, launcher: str, conftest: str | None = None) -> dict:
    root = tmp_path_factory.mktemp(name)
    problems, solutions = make_tree(root, CANDIDATES, yaml_patch={"forbid": []})
    if conftest:
        (problems / "conftest.py").write_text(conftest)
    proc, doc = run(root, str(problems), f"--kb-solutions={solutions}", "--kb-nproc=2", "--kb-timeout=60",
                    f"--kb-launcher={launcher}")
    assert doc is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"proc": proc, "doc": doc, "items": by_problem(doc), "root": root}


@pytest.fixture(scope="module")
def by_torchrun(tmp_path_factory):
    return _launched(tmp_path_factory, "launch_torchrun", "torchrun")


@pytest.fixture(scope="module")
def by_conftest(tmp_path_factory):
    return _launched(tmp_path_factory, "launch_conftest", "recording", CONFTEST)


def _exits(item: dict) -> ExitFacts:
    assert item.get("job_dir"), explain(item)
    facts = ExitFacts.read(JobLayout(item["job_dir"]).exits)
    assert facts is not None, f"no readable exits.json in {item['job_dir']}"
    return facts


@pytest.mark.e2e
@pytest.mark.parametrize("run_of", ["by_torchrun", "by_conftest"])
def test_a_crashing_rank_is_named_with_its_exit_code(run_of, request):
    launched = request.getfixturevalue(run_of)
    items = launched["items"]
    assert items["collective/good"]["outcome"] == "passed", explain(items["collective/good"])
    crashed = items["collective/exits_on_rank1"]
    assert crashed["failure"] == "crash", explain(crashed)
    assert crashed["message"].startswith("rank 1") and "exit code 7" in crashed["message"], explain(crashed)
    facts = _exits(crashed)
    # the rank server forks the conftest launcher's ranks: its facts say fork
    assert facts.launcher == ("torchrun" if run_of == "by_torchrun" else "fork")
    # each checker exits 3 once it reported its error (rank 0's collective broke too; which came first varies)
    assert facts.failed().get(1) and facts.root_cause in facts.failed(), facts
    assert sorted(facts.hosts) == [0, 1] and all(facts.hosts.values()), facts
    assert not leftover_processes(str(launched["root"]))


@pytest.mark.e2e
def test_both_built_in_launchers_write_one_exits_format(by_torchrun, by_conftest):
    """The same fields from either launcher (outcome/ reads only this file)."""
    raw = [json.loads(JobLayout(run["items"]["collective/exits_on_rank1"]["job_dir"]).exits.read_text())
           for run in (by_torchrun, by_conftest)]
    assert set(raw[0]) == set(raw[1]) == {f.name for f in dataclasses.fields(ExitFacts)}, raw
    assert all(r["exits"]["1"] != 0 and str(r["root_cause"]) in r["exits"] for r in raw), raw


SUMMARY = ("Failures:\n[1]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : -15 (pid: 2)\n"
           "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : 9 (pid: 3)\n")


@pytest.mark.parametrize("launcher", ["fork", "torchrun"])
def test_a_rank_that_died_without_a_word_is_named_with_its_exit_code(tmp_path, launcher):
    """Rank 1 exited 9 without reporting an error, rank 0 was stopped after it: whichever launcher
    wrote the exit facts, the outcome names rank 1 and its exit code (outcome/ reads exits.json
    only)."""
    layout = JobLayout(tmp_path)
    for sub in layout.SUBDIRS:
        (tmp_path / sub).mkdir()
    for r in (0, 1):
        layout.heartbeat(r).write_text(f"{time.time():.3f} size tiny, trial 0, candidate call\n")
    ranks: ForkedRanks | TorchrunRanks
    if launcher == "fork":
        ranks = ForkedRanks.__new__(ForkedRanks)      # the state a finished job leaves, without a zygote
        ranks.job_dir, ranks.exits, ranks.root, ranks.pids = tmp_path, {0: -signal.SIGTERM, 1: 9}, 1, {0: 11, 1: 12}
        ranks.layout = layout
    else:
        (layout.logs / "torchrun.log").write_text(SUMMARY)
        ranks = TorchrunRanks.__new__(TorchrunRanks)
        ranks.layout, ranks.nproc, ranks.proc = layout, 2, types.SimpleNamespace(returncode=1)
    ranks.write_exits()
    facts = ExitFacts.read(layout.exits)
    assert facts is not None and facts.launcher == launcher and facts.failed() == {0: -15, 1: 9}
    out = outcome.classify(tmp_path, "t", 2, 1)
    assert out.category == "crash" and out.message.startswith("rank 1 died (exit code 9)"), out.message


@pytest.mark.e2e
def test_a_conftest_launcher_runs_items_end_to_end(by_conftest):
    assert by_conftest["doc"]["config"]["settings"]["launcher"] == "recording"
    started = (by_conftest["root"] / "started.txt").read_text().splitlines()
    assert len(started) == 2 and all(line.endswith(" 2") for line in started), started
    jobs = {Path(line.split()[0]).name for line in started}
    crashed = by_conftest["items"]["collective/exits_on_rank1"]
    assert Path(crashed["job_dir"]).name in jobs, (crashed["job_dir"], jobs)


@pytest.mark.e2e
def test_unknown_launcher_is_a_usage_error_naming_the_known_ones(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", *plugin_args(), "--kb-launcher=mpirun", "--co", "-q"],
                          cwd=tmp_path, capture_output=True, text=True, env=inner_env())
    assert proc.returncode == 4, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stderr.splitlines() if "--kb-launcher" in ln)
    assert "'mpirun': expected fork, slurm or torchrun" in line and "pytest_kb_make_launcher" in line, line


def test_a_new_launcher_is_one_new_file(tmp_path, monkeypatch):
    """The registry finds launch/<name>.py by its module-level LAUNCHER: no list to edit."""
    for path in Path(registry.HERE).glob("*.py"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "mpirun.py").write_text("class MpirunLauncher:\n    name = 'mpirun'\n\n\nLAUNCHER = MpirunLauncher\n")
    monkeypatch.setattr(registry, "HERE", tmp_path)
    registry.builtin.cache_clear()
    try:
        assert registry.builtin() == ("fork", "mpirun", "slurm", "torchrun")
        assert registry.known() == "fork, mpirun, slurm or torchrun"
    finally:
        registry.builtin.cache_clear()


@pytest.mark.parametrize("returncode, expected", [(0, {0: 0, 1: 0}), (1, {0: -signal.SIGKILL, 1: 9})])
def test_a_task_srun_did_not_name_ended_0_only_in_a_step_that_succeeded(tmp_path, returncode, expected):
    """srun names a task only when it failed; under load it may leave out the tasks it then stopped
    (--kill-on-bad-exit). In a failed step those count as stopped, not as having ended well."""
    import threading
    layout = JobLayout(tmp_path)
    layout.logs.mkdir(parents=True)
    ranks = SlurmRanks.__new__(SlurmRanks)
    ranks.nproc, ranks.layout, ranks.returncode, ranks.step = 2, layout, returncode, "7.0"
    ranks.failed, ranks.order = ({1: 9}, [1]) if returncode else ({}, [])
    ranks.hosts, ranks._lock, ranks._log = {0: "n1", 1: "n2"}, threading.Lock(), open(layout.logs / "srun.log", "ab")
    ranks.write_exits()
    facts = ExitFacts.read(layout.exits)
    assert facts is not None and facts.exits == expected and facts.root_cause == (1 if returncode else None)


def test_after_a_rank_fails_its_peers_may_report_their_own_failure_before_they_are_stopped(monkeypatch):
    """A peer's error (a reset connection) can come first while the rank whose candidate died
    writes its own: the fork launcher stopped every other rank at once, and that rank was blamed
    for a timeout now and then (exits_on_rank1). The others get PEER_REPORT_S first."""
    from pytest_kernelbench.launch import fork
    monkeypatch.setattr(fork, "PEER_REPORT_S", 0.2)
    codes: dict[int, int] = {11: 3}                       # rank 0 failed; rank 1 still writing its error
    sent: list[int] = []

    def ranks_now() -> ForkedRanks:
        ranks = ForkedRanks.__new__(ForkedRanks)
        ranks.server = types.SimpleNamespace(exit_code=codes.get, alive=lambda: True)
        ranks.nproc, ranks.pids, ranks.exits = 2, {0: 11, 1: 12}, {}
        ranks.root = ranks.failed_at = ranks.stopped_at = ranks.returncode = None
        ranks.job_dir, ranks.ended_early = Path("/nonexistent"), False
        ranks.layout = JobLayout(ranks.job_dir)
        ranks._signal = sent.append
        return ranks

    ranks = ranks_now()
    assert ranks.poll() is None and not sent              # not stopped the moment rank 0 failed
    codes[12] = 3                                         # rank 1 reports its own failure and exits
    assert ranks.poll() == 1 and not sent and ranks.exits == {0: 3, 1: 3}
    # a peer that reports nothing (hung in a collective) is stopped once the time is up
    codes.pop(12)
    ranks = ranks_now()
    assert ranks.poll() is None and not sent
    time.sleep(0.25)
    assert ranks.poll() is None and sent == [signal.SIGTERM]


def test_a_job_ends_at_its_done_marks_without_waiting_out_the_ranks_exits(tmp_path):
    """Every checker writes its done mark last, after the result: the fork launcher ends the job
    there (the ranks' CUDA teardowns then overlap the next job's start), but never while a mark is
    missing or once a rank has failed."""
    codes: dict[int, int] = {}

    def ranks_now() -> ForkedRanks:
        ranks = ForkedRanks.__new__(ForkedRanks)
        ranks.server = types.SimpleNamespace(exit_code=codes.get, alive=lambda: True)
        ranks.nproc, ranks.pids, ranks.exits = 2, {0: 11, 1: 12}, {}
        ranks.root = ranks.failed_at = ranks.stopped_at = ranks.returncode = None
        ranks.job_dir, ranks.ended_early = tmp_path, False
        ranks.layout = JobLayout(tmp_path)
        ranks._signal = lambda sig: None
        return ranks

    layout = JobLayout(tmp_path)
    layout.marks.mkdir(parents=True)
    layout.done(0).write_text("mark")
    ranks = ranks_now()
    assert ranks.poll() is None and not ranks.ended_early          # rank 1 has not written its mark
    layout.done(1).write_text("mark")
    assert ranks.poll() == 0 and ranks.ended_early and ranks.exits == {}
    codes[11] = 3                                                   # a rank that failed: judged by its exit
    ranks = ranks_now()
    assert ranks.poll() is None and not ranks.ended_early and ranks.root == 0
