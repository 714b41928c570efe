"""The torchrun launcher (--kb-launcher=torchrun): torch.distributed.run starts the job's ranks
(one agent per job, `--standalone`), and its failure summary, parsed here and nowhere else, becomes
the job's logs/exits.json (protocol.ExitFacts) like every launcher's."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..contain import JOB_CGROUP_ENV
from ..procs import die_with_parent, has_token, parent_of
from ..protocol import ExitFacts, JobLayout

if TYPE_CHECKING:
    from ..options import Settings

LOG = JobLayout.TORCHRUN_LOG

# torchrun's failure summary: "  rank      : 1 (local_rank: 1)\n  exitcode  : 7 (pid: 123)"
_RANK_EXIT = re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", re.M)


def _dead_ranks(log: str) -> list[tuple[int, int]]:
    """(rank, exit code) of every rank the summary lists as failed, in its order."""
    found = [(int(r), int(c)) for r, c in _RANK_EXIT.findall(log)]
    return [(r, c) for r, c in found if c != 0]


def _root_cause(log: str) -> int | None:
    """The rank of torchrun's "Root Cause (first observed failure)"."""
    i = log.rfind("Root Cause")
    m = _RANK_EXIT.search(log, i) if i >= 0 else None
    return int(m.group(1)) if m else None


def exit_facts(log: str, nproc: int, returncode: int | None) -> ExitFacts:
    """The exit facts torchrun's log gives: its failure summary's ranks and root cause; every rank
    exited 0 when torchrun did. (A torchrun stopped at the deadline may print no summary: then no
    rank's exit is known.)"""
    exits = {int(r): int(c) for r, c in _RANK_EXIT.findall(log)}
    if returncode == 0:
        exits = {r: 0 for r in range(nproc)}
    host = socket.gethostname()
    return ExitFacts(launcher=TorchrunLauncher.name, exits=exits, root_cause=_root_cause(log),
                     hosts={r: host for r in range(nproc)}, log=LOG)


def _tail(path: Path, chars: int = 20000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - chars))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class TorchrunRanks:
    """One job's ranks under one torchrun agent (base.Ranks)."""
    agent = True       # stopping torchrun stops its ranks

    def __init__(self, job_dir: Path, nproc: int, env: dict[str, str], cwd: Path):
        self.layout, self.nproc = JobLayout(job_dir), nproc
        self.token = env.get("KB_JOB_TOKEN", "")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               "--max-restarts=0", "--monitor-interval=0.1", "-m", "pytest_kernelbench.rank", str(job_dir)]
        cgroup = env.get(JOB_CGROUP_ENV)
        env = {k: v for k, v in env.items() if k != JOB_CGROUP_ENV}

        def child() -> None:       # torchrun joins the job's cgroup before it runs: its ranks are born inside
            die_with_parent()
            if cgroup:
                try:
                    fd = os.open(os.path.join(cgroup, "cgroup.procs"), os.O_WRONLY)
                    os.write(fd, b"0")
                    os.close(fd)
                except OSError:    # refused here: run_job sees torchrun outside and scans instead
                    pass
        with open(self.layout.logs / LOG, "ab") as out:
            self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=child)

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout=timeout)

    def terminate(self) -> None:
        try:
            self.proc.send_signal(signal.SIGTERM)   # torchrun stops its ranks (they dump their stacks)
        except (ProcessLookupError, OSError):
            pass

    def roots(self) -> list[int]:
        return [self.proc.pid]

    def spared(self) -> set[int]:
        return set()

    def hand_over(self, secret: dict[str, str]) -> None:
        pass        # the checkers fetch the key from the key service on this machine

    def is_checker(self, pid: int) -> bool:
        return parent_of(pid) == self.proc.pid and has_token(pid, self.token)

    def finish(self) -> list[int]:
        return []

    def write_exits(self) -> None:
        exit_facts(_tail(self.layout.logs / LOG), self.nproc, self.proc.returncode).write(self.layout.exits)


class TorchrunLauncher:
    """base.Launcher: one torchrun per job (three interpreter starts and torch imports an item)."""
    name = "torchrun"
    local_gpus = True

    def __init__(self, settings: Settings | None = None) -> None:
        pass

    def prepare(self) -> None:
        pass

    def start(self, job_dir: Path, nproc: int, env: dict[str, str], cwd: Path) -> TorchrunRanks:
        return TorchrunRanks(job_dir, nproc, env, cwd)

    def close(self) -> None:
        pass


LAUNCHER = TorchrunLauncher     # --kb-launcher=torchrun (launch/registry.py finds it here)
