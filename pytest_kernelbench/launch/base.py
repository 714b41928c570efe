"""What a launcher is: the strategy that starts one job's ranks (fork: the rank server; torchrun;
slurm: one srun step). launch/__init__.py owns everything around it, for every launcher alike: the
deadline and compile budget, hunting the job's processes, the tree checks, the key service, log
capping. It talks to a `Launcher` and its `Ranks` only.

Adding a launcher: one new file launch/<name>.py with one class satisfying `Launcher` (and its
`Ranks`), named `LAUNCHER` at module level (registry.py finds it by that name; `--kb-launcher=<name>`
then works); or, outside the package, a plugin or conftest answering the `pytest_kb_make_launcher`
hook (hookspec.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class Ranks(Protocol):
    """One job's running ranks."""
    nproc: int
    returncode: int | None     # None while running; 0 when every rank exited 0
    # True when roots() is one agent process (torchrun, srun) whose ranks stop when it is stopped;
    # False when roots() are the ranks themselves
    agent: bool

    def poll(self) -> int | None:
        """The job's status now: None while any rank runs. When a rank fails the launcher stops
        the others itself (SIGTERM first, so their stack dumps reach their logs)."""
        ...

    # Optional: idle(timeout) waits up to `timeout` s for a rank to exit, so that the launcher's
    # loop (which polls every 50 ms) sees a job's end at once; without it the loop sleeps.
    # Optional: ended_early (bool), True once poll() returned 0 at every rank's done mark, before
    # the ranks exited: the launcher kills them then, and does not count them as strays.
    # Optional: queued() -> bool, True while a scheduler has not started the ranks yet (a Slurm
    # step waiting for the allocation's CPUs): that wait is not the candidate's, and is not on the
    # deadline (it has a bound of its own: launch.QUEUE_LIMIT_S, at least the deadline).

    def wait(self, timeout: float | None = None) -> int:
        """After the ranks were told to stop (or killed by the hunter): the job's status."""
        ...

    def terminate(self) -> None:
        """SIGTERM to every rank still running, wherever it runs (the deadline's first step; the
        process hunter then kills what is left on this machine)."""
        ...

    def roots(self) -> list[int]:
        """Pids on this machine that the process hunter starts from (the ranks, or the agent that
        started them)."""
        ...

    def spared(self) -> set[int]:
        """The launcher's own long-lived processes on this machine (a zygote), never the job's: the
        hunter leaves them alone."""
        ...

    def is_checker(self, pid: int) -> bool:
        """Whether `pid` is one of this job's checkers (only they may fetch the job's key)."""
        ...

    def hand_over(self, secret: dict[str, str]) -> None:
        """The job's key and input nonce, for checkers that cannot fetch them from this machine's
        key service (a Slurm step's tasks on other nodes get them on the step's stdin); launchers
        whose checkers use the key service do nothing."""
        ...

    def finish(self) -> list[int]:
        """Once the job ended and the hunter killed its strays: kill what the launcher's own
        processes still hold of the job, and get ready for the next job. Returns the pids killed."""
        ...

    def write_exits(self) -> None:
        """Write JobLayout.exits once the job ended, as protocol.ExitFacts: every rank's exit code,
        the root cause, and where each rank ran. outcome/ reads nothing else of the launcher."""
        ...


@runtime_checkable
class Launcher(Protocol):
    """Made by launch/registry.py with the run's Settings (or by a plugin through the hook)."""
    name: str
    # True when the ranks run on this machine, so the session leases them its GPUs; False when the
    # launcher's own scheduler hands out GPUs where the ranks run (Slurm)
    local_gpus: bool

    def prepare(self) -> None:
        """Work that may start ahead of the first job (the fork launcher starts its zygote, which
        imports torch); may do nothing."""
        ...

    def start(self, job_dir: Path, nproc: int, env: dict[str, str], cwd: Path) -> Ranks:
        """Start the job's ranks (each runs `python -m pytest_kernelbench.rank <job_dir>` with RANK,
        WORLD_SIZE, LOCAL_RANK, MASTER_ADDR set; `env` has the job's token and GPUs); raise
        LaunchError with a one-line reason when it cannot."""
        ...

    def close(self) -> None:
        """End of the session: stop whatever the launcher keeps between jobs (a zygote)."""
        ...


class LaunchError(RuntimeError):
    """The ranks could not be started (str(): why); the item's outcome is error:harness_error."""
