"""A job that dies whole: each job's processes (its ranks, their solver processes and whatever they
start) live in a cgroup v2 of their own, and at the job's end one write to its cgroup.kill ends all
of them at once. The kernel kills what a fork creates while the kill runs too, so a daemon that
forks and exits faster than any scan of /proc (procs.ProcessHunter) cannot outrun it.

Layout: <the pytest process's own cgroup>/kb-<pid>-<hex>/ (one per pytest process, made on first
use, removed at exit), with one child per job. A launcher puts the job's first processes in the
job's cgroup as they are forked (JOB_CGROUP_ENV in the job's environment names it; the zygote's
child and torchrun's preexec_fn join it before any code of the job runs), so everything they fork
inherits it. A process of a non-root user cannot leave a root-owned cgroup.

Where cgroups cannot be written (no cgroup v2 with cgroup.kill, not root, a container that hides
it), `job_cgroup` gives None and the job is contained as before: procs.ProcessHunter's scans, and
any orphan of our own from another session is killed whatever its age. The report's header says
which containment is in force (protocol.Containment). KB_CONTAINMENT=scan (a dev knob) asks for the
scans alone, as where no cgroup can be used.
"""
from __future__ import annotations

import atexit
import os
import secrets
import time
from pathlib import Path

from .protocol import Containment

JOB_CGROUP_ENV = "KB_JOB_CGROUP"     # the job's cgroup folder, for the launcher (never reaches a rank)
KILL_WAIT_S = 5.0                     # at exit: how long killed processes may take to be gone


def _v2_mount() -> Path | None:
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split()[:1] == ["cgroup2"]:
                    return Path(left.split()[4])
    except OSError:
        pass
    return None


def _own_cgroup() -> str | None:
    """This process's cgroup v2 path (the "0::" line of /proc/self/cgroup)."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def join(path: str) -> None:
    """Move the calling process into the cgroup at `path` (in a freshly forked child, before any of
    the job's code runs: what it forks is then born inside)."""
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write("0")


def members(path: str | Path) -> list[int]:
    try:
        return [int(x) for x in Path(path, "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def populated(path: str | Path) -> bool:
    try:
        for line in Path(path, "cgroup.events").read_text().splitlines():
            if line.startswith("populated "):
                return line.split()[1] != "0"
    except OSError:
        return False
    return False


class JobCgroup:
    """One job's cgroup: processes join it as they are forked; kill() ends them all and removes it."""

    def __init__(self, path: Path):
        self.path = path

    def __str__(self) -> str:
        return str(self.path)

    def add(self, pid: int) -> bool:
        """Move a process in from outside (a launcher that did not join it itself): what the process
        forked before the move stays outside, so launchers join at fork instead."""
        try:
            with open(self.path / "cgroup.procs", "w") as f:
                f.write(str(pid))
            return True
        except OSError:
            return False

    def kill(self, wait_s: float = 0.0) -> list[int]:
        """SIGKILL every process in it at once (cgroup.kill: once the write returns, none of them runs
        its code again, and a fork racing it is killed too), and remove it. Returns the pids that
        were in it. A killed process may take a while to be gone (a CUDA process's teardown takes
        0.2-0.5 s that the next job need not wait for): unless `wait_s` allows for it, its folder
        goes when the next job's cgroup is made (RunCgroups.job) or at exit."""
        found = members(self.path)
        try:
            (self.path / "cgroup.kill").write_text("1")
        except OSError:
            return found
        end = time.monotonic() + wait_s
        while populated(self.path) and time.monotonic() < end:
            time.sleep(0.005)
        try:
            self.path.rmdir()
        except OSError:
            pass
        return found


class RunCgroups:
    """The cgroup this pytest process keeps its jobs in (made on first use); None where cgroups
    cannot be used."""
    _made: RunCgroups | None = None
    _tried = False

    def __init__(self, path: Path):
        self.path = path
        atexit.register(self.remove)

    @classmethod
    def get(cls) -> RunCgroups | None:
        if not cls._tried:
            cls._made, cls._tried = cls._make(), True
        return cls._made

    @classmethod
    def _make(cls) -> RunCgroups | None:
        if os.environ.get("KB_CONTAINMENT") == Containment.SCAN or os.geteuid() != 0:
            return None
        mount, own = _v2_mount(), _own_cgroup()
        if mount is None or own is None:
            return None
        _remove_stale(mount / own.lstrip("/"))
        path = mount / own.lstrip("/") / f"kb-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            path.mkdir()
        except OSError:
            return None
        probe = path / "probe"
        try:       # cgroup.kill (Linux 5.14); whether a process can move in is seen at each job (run_job)
            probe.mkdir()
            ok = (probe / "cgroup.kill").exists() and os.access(probe / "cgroup.procs", os.W_OK)
            probe.rmdir()
        except OSError:
            ok = False
        if not ok:
            try:
                path.rmdir()
            except OSError:
                pass
            return None
        return cls(path)

    def job(self, name: str) -> JobCgroup | None:
        for old in (p for p in self.path.glob("*") if p.is_dir()):   # the jobs before: gone by now
            JobCgroup(old).kill()
        path = self.path / name
        try:
            path.mkdir()
        except OSError:
            return None
        return JobCgroup(path)

    def remove(self) -> None:
        """At exit: anything still inside is killed, then the folders go."""
        for child in sorted(p for p in self.path.glob("*") if p.is_dir()):
            JobCgroup(child).kill(wait_s=KILL_WAIT_S)
        try:
            self.path.rmdir()
        except OSError:
            pass


def _remove_stale(parent: Path) -> None:
    """The cgroups of a pytest process that is gone (killed before its atexit ran): whatever is
    left inside is killed, the folders removed."""
    for run in parent.glob("kb-*-*"):
        try:
            pid = int(run.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if os.path.exists(f"/proc/{pid}"):
            continue
        for child in (p for p in run.glob("*") if p.is_dir()):
            JobCgroup(child).kill(wait_s=KILL_WAIT_S)
        try:
            run.rmdir()
        except OSError:
            pass


def job_cgroup(name: str) -> JobCgroup | None:
    run = RunCgroups.get()
    return run.job(name) if run is not None else None


def in_force() -> str:
    """Which containment jobs of this process get (protocol.Containment)."""
    return Containment.CGROUP if RunCgroups.get() is not None else Containment.SCAN
