"""The fork launcher (--kb-launcher=fork, the default): rank processes without torchrun. A
long-lived zygote (rank/zygote.py) that has imported torch forks each rank's checker of each job,
so an item no longer pays for three interpreter starts and torch imports (torchrun's agent and
every rank).

`RankServer` owns the zygote (one per pytest process, started on first use or ahead of the first
item); `ForkedRanks` is one job's ranks (base.Ranks), with torchrun's teardown: when a rank fails,
the others are stopped with SIGTERM (their stacks go to their logs); the exit codes go to
logs/exits.json (protocol.ExitFacts). `ForkLauncher` is the base.Launcher that ties them.
"""
from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..contain import JOB_CGROUP_ENV
from ..procs import alive, die_with_parent
from ..protocol import ExitFacts, JobLayout
from .base import LaunchError
from .env import job_env

if TYPE_CHECKING:
    from ..options import Settings

START_TIMEOUT_S = 120.0      # importing torch on a loaded machine
SPAWN_TIMEOUT_S = 30.0
STOP_GRACE_S = 5.0           # after a rank fails, how long the others get to die of SIGTERM
# after a rank fails, how long the others get to report their own failure before they are stopped:
# a peer's error (a reset connection) can come first while the rank whose candidate died writes its
# own, and a rank stopped before it has written is blamed for a timeout (a candidate's os._exit on
# rank 1 read "timeout" about one run in seven under load)
PEER_REPORT_S = 0.5


class RankServerError(LaunchError):
    """The zygote did not start or stopped answering (it is restarted on the next job)."""


class RankServer:
    def __init__(self, env: dict[str, str]):
        self.env = env
        self._log = tempfile.TemporaryFile()     # the zygote's stderr: why it could not start
        self.proc: subprocess.Popen | None = None
        self._secret = secrets.token_hex(16)
        self._replies: queue.Queue = queue.Queue()
        self._exits: dict[int, int] = {}
        self._lock = threading.Lock()
        self._ids = 0
        self._ready_pid: int | None = None     # the zygote whose "ready" was read
        self.exited = threading.Event()        # set on each exit the zygote reports

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the zygote without waiting for its torch import (spawn waits for it)."""
        if self.alive():
            return
        self.close()
        self._secret, self._replies, self._exits = secrets.token_hex(16), queue.Queue(), {}
        self._log.seek(0)
        self._log.truncate()
        self.proc = subprocess.Popen([sys.executable, "-m", "pytest_kernelbench.rank.zygote"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     env=self.env, cwd="/", preexec_fn=die_with_parent, bufsize=0)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True, name="kb-rankserver").start()
        self._send({"secret": self._secret})

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "exit" in msg:
                with self._lock:
                    self._exits[int(msg["exit"])] = int(msg["code"])
                self.exited.set()
            else:
                self._replies.put(msg)
        self._replies.put(None)
        self.exited.set()

    def _send(self, msg: dict) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        # the leading newline ends whatever a rank may have written into this pipe (see zygote.py)
        self.proc.stdin.write(b"\n" + json.dumps(msg).encode() + b"\n")

    def _reply(self, timeout: float, want: str) -> dict:
        end = time.monotonic() + timeout
        while True:
            try:
                msg = self._replies.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                raise RankServerError(f"the rank server did not answer within {timeout:.0f} s") from None
            if msg is None:
                code = self.proc.wait() if self.proc else None
                raise RankServerError(f"the rank server exited (code {code}){self._stderr_tail()}")
            if want in msg or "error" in msg:
                return msg

    def ready(self, timeout: float = START_TIMEOUT_S) -> None:
        if self._ready_pid == self.pid and self.alive():
            return
        self._reply(timeout, "ready")
        self._ready_pid = self.pid

    def spawn(self, job_dir: Path, rank: int, env: dict[str, str], cwd: Path, log: Path, cgroup: str | None = None) -> int:
        """Fork one rank (into the job's `cgroup`, before any of its code runs); returns its pid.
        Restarts a zygote that died or stopped answering, once."""
        for attempt in (0, 1):
            try:
                self.start()
                self.ready()
                self._ids += 1
                self._send({"secret": self._secret, "op": "spawn", "id": self._ids, "job_dir": str(job_dir),
                            "env": env, "cwd": str(cwd), "log": str(log), "cgroup": cgroup})
                msg = self._reply(SPAWN_TIMEOUT_S, "pid")
                if "error" in msg:
                    raise RankServerError(msg["error"])
                return int(msg["pid"])
            except (RankServerError, OSError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _stderr_tail(self) -> str:
        try:
            self._log.seek(0)
            lines = self._log.read()[-4000:].decode(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return f": {' | '.join(ln.strip() for ln in lines[-3:])}" if lines else ""   # the error, not the traceback

    def exit_code(self, pid: int) -> int | None:
        with self._lock:
            return self._exits.get(pid)

    def check(self, timeout: float = 5.0) -> bool:
        """After a job: is the zygote still answering? One that is not is killed (restarted on next use)."""
        if not self.alive():
            return False
        try:
            self._ids += 1
            self._send({"secret": self._secret, "op": "ping", "id": self._ids})
            self._reply(timeout, "pong")
            return True
        except (RankServerError, OSError):
            self.close()
            return False

    def reap(self, timeout: float = 5.0) -> list[int]:
        """After a job: kill every child of the zygote still alive (a rank that lingers, or a process
        a candidate left re-parented to it). Returns their pids."""
        if not self.alive():
            return []
        try:
            self._ids += 1
            self._send({"secret": self._secret, "op": "reap", "id": self._ids})
            return list(self._reply(timeout, "reaped").get("reaped") or [])
        except (RankServerError, OSError):
            self.close()
            return []

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ForkedRanks:
    """One job's ranks, forked by the zygote (base.Ranks)."""
    agent = False      # the hunter starts from the ranks themselves, each in its own session

    def __init__(self, server: RankServer, job_dir: Path, nproc: int, env: dict[str, str], cwd: Path):
        self.server, self.job_dir, self.nproc = server, Path(job_dir), nproc
        self.layout = JobLayout(self.job_dir)
        self.exits: dict[int, int] = {}
        self.root: int | None = None
        self.failed_at: float | None = None
        self.stopped_at: float | None = None
        self.returncode: int | None = None
        self.ended_early = False       # ended at the done marks, before the ranks' exits (poll)
        self.pids: dict[int, int] = {}
        cgroup = env.get(JOB_CGROUP_ENV)      # the job's cgroup: for the zygote, not the ranks' environment
        env = {k: v for k, v in env.items() if k != JOB_CGROUP_ENV}
        base = {**env, "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0",
                "MASTER_ADDR": "127.0.0.1", "KB_RENDEZVOUS": str(self.job_dir / "rendezvous")}
        try:
            for r in range(nproc):
                rank_env = {**base, "RANK": str(r), "LOCAL_RANK": str(r), "ROLE_RANK": str(r)}
                self.pids[r] = server.spawn(self.job_dir, r, rank_env, cwd, self.layout.checker_log(r), cgroup)
        except BaseException:
            self.kill()
            raise

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        for r, pid in self.pids.items():
            if r not in self.exits and (code := self.server.exit_code(pid)) is not None:
                self.exits[r] = code
                if code != 0 and self.root is None:
                    self.root = r
        if self.root is not None and self.failed_at is None:
            self.failed_at = time.monotonic()
        if (self.failed_at is not None and self.stopped_at is None
                and time.monotonic() - self.failed_at > PEER_REPORT_S):   # torchrun's way: one fails, all stop
            self.stopped_at = time.monotonic()
            self._signal(signal.SIGTERM)
        elif self.stopped_at is not None and time.monotonic() - self.stopped_at > STOP_GRACE_S:
            self._signal(signal.SIGKILL)
        if self.root is None and len(self.exits) < self.nproc and self.verdicts_in():
            # every checker has written its done mark, after the result: what is left of the job is
            # its processes' exits, a CUDA teardown of 0.2-0.5 s that the next job need not wait
            # for (it does not slow the next one's contexts and groups:
            # reports/baselines/2026-11-27-h100x1-fixedpart.md); the launcher kills them now, and
            # outcome.classify still checks every mark against the job's key
            self.ended_early = True
            self.returncode = 0
            return 0
        if len(self.exits) < self.nproc and not self.server.alive():
            # the zygote is gone (a rank may kill its parent): its ranks died with it (PDEATHSIG), and
            # no exit code will come; the hunter kills any that linger
            self._unreported_killed()
        if len(self.exits) == self.nproc:
            self.returncode = 1 if self.root is not None else 0
        return self.returncode

    def verdicts_in(self) -> bool:
        """Whether every rank's done mark is there (its checker wrote it last, after the result)."""
        return all(self.layout.done(r).is_file() for r in range(self.nproc))

    def idle(self, timeout: float) -> None:
        """Wait up to `timeout` for a rank's exit (the launcher's loop then polls at once)."""
        self.server.exited.wait(timeout)
        self.server.exited.clear()

    def wait(self, timeout: float | None = None) -> int:
        """After the ranks were killed: their exit codes, or -SIGKILL for those the zygote never
        reported (one a candidate stopped cannot reap: its ranks stay zombies)."""
        end = None if timeout is None else time.monotonic() + timeout
        gone_since = None
        while self.poll() is None:
            now = time.monotonic()
            if not any(alive(p) for r, p in self.pids.items() if r not in self.exits):
                gone_since = gone_since or now
            if (end is not None and now > end) or (gone_since and now - gone_since > 1.0):
                self._unreported_killed()
                continue
            time.sleep(0.02)
        return self.returncode   # type: ignore[return-value]

    def _unreported_killed(self) -> None:
        """Ranks whose exit the zygote will never report count as killed (-SIGKILL)."""
        for r in sorted(set(self.pids) - set(self.exits)):
            self.exits[r] = -signal.SIGKILL
            self.root = r if self.root is None else self.root

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        for r, pid in self.pids.items():
            if r not in self.exits:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    def roots(self) -> list[int]:
        return list(self.pids.values())

    def spared(self) -> set[int]:
        return {self.server.pid} if self.server.pid else set()

    def hand_over(self, secret: dict[str, str]) -> None:
        pass        # the checkers fetch the key from the key service on this machine

    def is_checker(self, pid: int) -> bool:
        return pid in self.pids.values()

    def finish(self) -> list[int]:
        killed = self.server.reap()   # nothing of this job lingers in the zygote's family
        self.server.check()    # a zygote a candidate stopped or killed is replaced before the next item
        return killed

    def write_exits(self) -> None:
        host = socket.gethostname()
        ExitFacts(launcher=ForkLauncher.name, exits=dict(self.exits), root_cause=self.root,
                  hosts={r: host for r in self.pids}, pids=dict(self.pids)).write(self.layout.exits)


class ForkLauncher:
    """base.Launcher: every job's ranks forked by one zygote, kept for the session."""
    name = "fork"
    local_gpus = True

    def __init__(self, settings: Settings | None = None) -> None:
        self.server: RankServer | None = None

    def prepare(self) -> None:
        """Start the zygote now: its torch import overlaps with the first item's preparation."""
        if self.server is None:
            # the zygote only imports torch: each rank gets its job's whole environment (build folders too)
            self.server = rank_server()
        self.server.start()

    def start(self, job_dir: Path, nproc: int, env: dict[str, str], cwd: Path) -> ForkedRanks:
        self.prepare()
        assert self.server is not None
        return ForkedRanks(self.server, job_dir, nproc, env, cwd)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def rank_server(extensions_dir: str | None = None) -> RankServer:
    """A rank server whose zygote has the ranks' environment but no job's token or GPUs (each
    forked rank gets its job's, see env.job_env)."""
    env = job_env("", None, extensions_dir)
    env.pop("KB_JOB_TOKEN")
    return RankServer(env)


LAUNCHER = ForkLauncher     # --kb-launcher=fork (launch/registry.py finds it here)
