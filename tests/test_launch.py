"""launch: the rank log cap keeps a log's head; the deadline counts neither compiling nor a scheduler's queue."""
from __future__ import annotations

import time

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
