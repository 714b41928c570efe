"""What a launcher is: the strategy that starts one job's ranks (fork: the rank server; torchrun;
slurm: one srun step). launch/__init__.py owns everything around it, for every launcher alike: the
deadline and compile budget, hunting the job's processes, the tree checks, the key service.

A launcher module defines one class satisfying `Launcher`, and registers its name in LAUNCHERS
(built-ins) or answers the `pytest_kb_make_launcher` hook (hookspec.py) from a plugin or conftest.
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol


class Ranks(Protocol):
    """One job's running ranks."""
    nproc: int
    returncode: int | None     # None while running; 0 when every rank exited 0

    def poll(self) -> int | None:
        """The job's status now: None while any rank runs. When a rank fails the launcher stops
        the others itself (SIGTERM first, so their stack dumps reach their logs)."""
        ...

    def wait(self, timeout: float | None = None) -> int:
        """After the ranks were told to stop (or killed by the hunter): the job's status."""
        ...

    def terminate(self) -> None:
        """SIGTERM to every rank still running, wherever it runs (the deadline's first step)."""
        ...

    def roots(self) -> list[int]:
        """Pids on this machine that the process hunter starts from (the ranks, or the agent that
        started them)."""
        ...

    def is_checker(self, pid: int) -> bool:
        """Whether `pid` is one of this job's checkers (only they may fetch the job's key)."""
        ...

    def write_exits(self) -> None:
        """Write JobLayout.exits once the job ended, in protocol.write_exits' one format: every
        rank's exit code, the root cause, and where each rank ran. outcome.py reads nothing else."""
        ...


class Launcher(Protocol):
    name: str

    def start(self, job_dir: Path, nproc: int, env: dict[str, str], cwd: Path) -> Ranks:
        """Start the job's ranks (each runs `python -m pytest_kernelbench.rank <job_dir>` with RANK,
        WORLD_SIZE, LOCAL_RANK, MASTER_ADDR set); raise LaunchError with a one-line reason when it
        cannot."""
        ...

    def close(self) -> None:
        """End of the session: stop whatever the launcher keeps between jobs (a zygote)."""
        ...


class LaunchError(RuntimeError):
    """The ranks could not be started (str(): why); the item's outcome is error:harness_error."""
