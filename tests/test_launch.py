"""launch: the rank log cap keeps a log's head; the deadline counts neither compiling nor a scheduler's queue."""
from __future__ import annotations

import time

import pytest

from pytest_kernelbench import launch


def test_log_cap_truncates_but_keeps_head(tmp_path):
    (tmp_path / "logs").mkdir()
    log = tmp_path / "logs" / "rank0.log"
    log.write_bytes(b"first line\n" + b"x" * 5000)
    assert launch.cap_logs(tmp_path, limit=1000) == ["rank0.log"]
    assert log.stat().st_size == 0 and (tmp_path / "logs" / "rank0.head").read_bytes().startswith(b"first line")


class _QueuedRanks:
    """Ranks a scheduler starts `queued_s` after launch (a Slurm step waiting for the allocation's
    CPUs), which then run `run_s` and exit 0."""
    nproc, agent, returncode = 2, False, None

    def __init__(self, queued_s: float, run_s: float, say_queued: bool = True):
        self.t0, self.queued_s, self.run_s = time.monotonic(), queued_s, run_s
        if say_queued:
            self.queued = lambda: time.monotonic() - self.t0 < self.queued_s

    def poll(self):
        if time.monotonic() - self.t0 >= self.queued_s + self.run_s:
            self.returncode = 0
        return self.returncode


class _NoHunter:
    def scan(self):
        return set()


def _wait(tmp_path, ranks, timeout_s):
    (tmp_path / "logs").mkdir(exist_ok=True)
    return launch._wait(ranks, _NoHunter(), tmp_path, time.monotonic(), timeout_s, 600.0, [])[0]


def test_time_a_scheduler_takes_to_start_the_ranks_is_not_on_the_deadline(tmp_path):
    # a Slurm step after a failed one waited for its CPUs while the deadline ran: the item failed
    # "timeout (no rank reported a phase)" though no rank had started
    assert _wait(tmp_path, _QueuedRanks(queued_s=1.5, run_s=0.3), timeout_s=1.0) is None
    assert "deadline of 1 s" in _wait(tmp_path, _QueuedRanks(queued_s=1.5, run_s=0.3, say_queued=False), timeout_s=1.0)
    assert "deadline of 1 s" in _wait(tmp_path, _QueuedRanks(queued_s=0.2, run_s=5.0), timeout_s=1.0)


def test_a_scheduler_that_never_starts_the_ranks_ends_the_item_saying_so(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "QUEUE_LIMIT_S", 1.0)
    reason = _wait(tmp_path, _QueuedRanks(queued_s=60.0, run_s=0.1), timeout_s=0.5)
    assert reason == ("the scheduler did not start the ranks within 1 s (the allocation's nodes stayed busy: "
                      "see logs/srun.log)")


class _Running:
    """Ranks that never exit by themselves (the launcher's deadline or stall check ends them)."""
    agent, returncode = False, None

    def __init__(self, nproc: int):
        self.nproc = nproc

    def poll(self):
        return None


class _Hunter:
    def __init__(self, pids: set[int]):
        self.pids = pids

    def scan(self):
        return set(self.pids)


def _first_call(tmp_path, candidates: list, visible: bool = True, last: str | None = None):
    """_wait on 2 ranks in their first call, each "candidate process" a real process (`candidates`),
    under a 1 s stall limit and a 4 s deadline."""
    from pytest_kernelbench.protocol import SETUP_MARK, JobLayout, heartbeat_record
    layout = JobLayout(tmp_path)
    layout.logs.mkdir(exist_ok=True)
    layout.hb.mkdir(exist_ok=True)
    for r, proc in enumerate(candidates):
        phase = last if last and r == len(candidates) - 1 else f"size tiny, trial 0, candidate call {SETUP_MARK}"
        layout.heartbeat(r).write_bytes(heartbeat_record(1, time.time(), phase))
        layout.pids(r).write_text(f"{10**7 + r} {proc.pid} 0\n")
    hunter = _Hunter({p.pid for p in candidates} if visible else set())
    t0 = time.monotonic()
    reason = launch._wait(_Running(len(candidates)), hunter, tmp_path, t0, 4.0, 600.0, [], hang_s=1.0)[0]
    return reason, time.monotonic() - t0


@pytest.mark.e2e
def test_a_first_call_where_nothing_runs_is_a_hang_within_the_stall_limit(tmp_path):
    """The first call runs on the compile budget, but one in which no candidate process uses CPU
    (and nothing compiles) for the process-group timeout is a hang (launch/stall.py); a candidate
    that burns CPU, ranks this host cannot see (a Slurm step's other nodes), or a rank not in its first
    call (its checker at work) leave it to the deadline."""
    import subprocess
    import sys
    idle = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        reason, took = _first_call(tmp_path, idle)
        assert reason.startswith("a hang in the first call: no rank compiled or used CPU for 1 s"), reason
        assert took < 3.5, took
        reason, took = _first_call(tmp_path, [idle[0], busy])
        assert reason == "deadline of 4 s passed", reason
        reason, took = _first_call(tmp_path, idle, visible=False)
        assert reason == "deadline of 4 s passed", reason
        # a checker still making its inputs (its own CPU, not watched): its peer's first call waits on it
        reason, took = _first_call(tmp_path, idle, last="size tiny, trial 0, inputs")
        assert reason == "deadline of 4 s passed", reason
    finally:
        for p in [*idle, busy]:
            p.kill()
            p.wait()
