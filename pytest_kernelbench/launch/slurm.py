"""`--kb-launcher=slurm`: one Slurm step per item, its ranks spread over `--kb-nodes` nodes of the
allocation (`srun -u -N{n} --ntasks-per-node={W/n} --exact --kill-on-bad-exit=1`).

- The allocation's job-level SLURM_* options are dropped from srun's environment (they would
  leak into the step: slurm_workers.drop_job_options); each task maps Slurm's task variables to
  its rank variables (rank/steps.py).
- Key delivery: the job's key and input nonce go to every task on the step's stdin
  (`--input=all`), never into a file or an environment. The checker reads them only after it
  forked its candidate process, from a descriptor the candidate does not inherit (rank/steps.py).
- Rendezvous: rank 0's checker serves the store on a port the OS picks and prints its address on
  its stdout; this launcher relays it to every task's stdin. Nothing waits for a file to appear
  on a shared filesystem, and the store binds an address the other nodes reach.
- Exit facts: srun reports a task's end only as `srun: error: NODE: task R: Exited with exit code
  N` (or `: Killed`, `: Terminated`); they are parsed here and written as logs/exits.json with
  the root cause (the first task that exited non-zero on its own) and the node of every rank.
- Deadline: `scancel -s TERM <job>.<step>` reaches every task on every node (their stack dumps
  land in their logs), then `scancel -s KILL`.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..contain import JOB_CGROUP_ENV
from ..procs import die_with_parent
from ..protocol import ExitFacts, JobLayout, JobSpec, range_list
from .base import LaunchError
from .slurm_workers import KEEP, drop_job_options

if TYPE_CHECKING:
    from ..options import Settings

# "1 tasks: 0", and for several tasks on a node a range list: "2 tasks: [0-1]", "3 tasks: [0,2-3]"
STEP_LINE = re.compile(r"launching StepId=(\d+)\.(\d+) on host (\S+), \d+ tasks?: \[?([\d ,\-]+)\]?")
EXIT_LINE = re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): (.*)")
SIGNALS = {"Killed": -signal.SIGKILL, "Terminated": -signal.SIGTERM, "Aborted": -signal.SIGABRT,
           "Segmentation fault": -signal.SIGSEGV, "Interrupt": -signal.SIGINT, "Bus error": -signal.SIGBUS}
STOP_GRACE_S = 5.0


def exit_code(what: str) -> int | None:
    m = re.match(r"Exited with exit code (\d+)", what)
    if m:
        return int(m.group(1))
    return SIGNALS.get(what.strip())


class SlurmRanks:
    """One item's step: the srun process on this machine, its tasks wherever Slurm put them."""
    agent = True        # srun: stopping it (scancel) stops the tasks on every node

    def __init__(self, cmd: list[str], job_dir: Path, nproc: int, env: dict[str, str], cwd: Path):
        self.job_dir, self.nproc = Path(job_dir), nproc
        self.layout = JobLayout(self.job_dir)
        self.returncode: int | None = None
        self.step: str | None = None
        self.hosts: dict[int, str] = {}
        self.failed: dict[int, int] = {}       # rank -> code, in the order srun reported them
        self.order: list[int] = []
        self._log = open(self.layout.logs / "srun.log", "ab")
        self._lock = threading.Lock()
        self._secret: bytes | None = None
        try:
            self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=True, preexec_fn=die_with_parent,
                                         bufsize=0)
        except OSError as e:
            self._log.close()
            raise LaunchError(f"could not start srun: {e}") from None
        self.pid = self.proc.pid
        self._readers = [threading.Thread(target=self._read_out, daemon=True, name="kb-srun-out"),
                         threading.Thread(target=self._read_err, daemon=True, name="kb-srun-err")]
        for t in self._readers:
            t.start()

    # ---- the step's stdin: key, then the rendezvous address -------------------------------------------
    def hand_over(self, secret: dict[str, str]) -> None:
        """The job's key and nonce to every task (the first line of each task's stdin)."""
        self._write(json.dumps(secret).encode() + b"\n")

    def _write(self, data: bytes) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass            # srun already gone: its exit tells why

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.decode(errors="replace").split()
            if len(parts) == 3 and parts[0] == "kb-store" and parts[2].isdigit():
                self._write(json.dumps({"store": [parts[1], int(parts[2])]}).encode() + b"\n")
            else:
                self._logline(b"stdout: " + line)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").strip()
            if m := STEP_LINE.search(line):
                self.step = f"{m.group(1)}.{m.group(2)}"
                for r in range_list(",".join(m.group(4).split())):
                    self.hosts[r] = m.group(3)
            elif m := EXIT_LINE.search(line):
                code = exit_code(m.group(3))
                for r in range_list(m.group(2)):
                    self.hosts.setdefault(r, m.group(1))
                    with self._lock:
                        if code is not None and r not in self.failed:
                            self.failed[r] = code
                            self.order.append(r)
            if "defined options" in line or line.startswith("srun: ---") or ":   " in line or \
                    line.startswith("srun: launch/slurm: _task_") or "plugin loaded" in line:
                continue        # -v's option echo and chatter; the rest is kept
            self._logline(raw)

    def _logline(self, line: bytes) -> None:
        try:
            self._log.write(line if line.endswith(b"\n") else line + b"\n")
            self._log.flush()
        except (OSError, ValueError):
            pass

    # ---- the Ranks protocol --------------------------------------------------------------------------
    def queued(self) -> bool:
        """srun has not launched the step yet: it waits for the allocation's CPUs (a step before it
        still completing), which is Slurm's time, not the candidate's (base.Ranks.queued)."""
        return self.step is None and self.proc.poll() is None

    def poll(self) -> int | None:
        if self.returncode is None and self.proc.poll() is not None:
            for t in self._readers:
                t.join(5.0)
            self.returncode = self.proc.returncode
            self.write_exits()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                self.kill()
                self.proc.wait(5.0)
                continue
            time.sleep(0.05)
        return self.returncode      # type: ignore[return-value]

    def terminate(self) -> None:
        """SIGTERM to every task on every node (their stacks go to their logs), then SIGKILL after
        a grace, through the controller: signalling srun alone would not reach another node."""
        if self._scancel("TERM"):
            end = time.monotonic() + STOP_GRACE_S
            while self.proc.poll() is None and time.monotonic() < end:
                time.sleep(0.1)
        if self.proc.poll() is None:
            self.kill()

    def kill(self) -> None:
        if not self._scancel("KILL"):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _scancel(self, sig: str) -> bool:
        if self.step is None:
            return False
        r = subprocess.run(["scancel", "-s", sig, self.step], capture_output=True, text=True, timeout=30)
        self._logline(f"kernelbench: scancel -s {sig} {self.step}: exit {r.returncode} {r.stderr.strip()}".encode())
        return r.returncode == 0

    def roots(self) -> list[int]:
        return [self.proc.pid]

    def is_checker(self, pid: int) -> bool:
        return False        # the key travels on the step's stdin, not on the control socket

    def spared(self) -> set[int]:
        return set()

    def finish(self) -> list[int]:
        return []           # the step is over: Slurm's step daemons reaped its tasks on every node

    def write_exits(self) -> None:
        with self._lock:
            failed, order = dict(self.failed), list(self.order)
        # a task srun did not name ended 0 in a step that succeeded; in one that failed it was stopped
        # with the step (--kill-on-bad-exit: srun names such tasks, or under load leaves them out)
        unnamed = 0 if self.returncode == 0 else -signal.SIGKILL
        exits = {r: failed.get(r, unnamed) for r in range(self.nproc)}
        # the root cause: the first task that exited with a code of its own (the others were then
        # stopped by --kill-on-bad-exit), else the first reported at all
        root = next((r for r in order if failed[r] > 0), order[0] if order else None)
        ExitFacts("slurm", exits=exits, root_cause=root, hosts=dict(sorted(self.hosts.items())), step=self.step,
                  log="srun.log").write(self.layout.exits)
        self._log.close()


class SlurmLauncher:
    """Starts each item's ranks as one Slurm step spanning --kb-nodes nodes."""
    name = "slurm"
    local_gpus = False      # Slurm gives each step its GPUs (--gpus-per-node)

    def __init__(self, settings: Settings | None = None, srun: str = "srun"):
        self.nodes, self.srun = (settings.nodes if settings is not None else 1), srun

    def prepare(self) -> None:
        pass

    def command(self, job_dir: Path, nproc: int, device: str = "cpu") -> list[str]:
        if nproc % self.nodes:
            raise LaunchError(f"{nproc} ranks do not split evenly over --kb-nodes={self.nodes}")
        per_node = nproc // self.nodes
        cmd = [self.srun, "-v", "-u", f"-N{self.nodes}", f"--ntasks-per-node={per_node}", "--exact",
               "--kill-on-bad-exit=1", "--input=all", f"--job-name=kb-{job_dir.name}"[:60]]
        if device == "cuda":
            cmd.append(f"--gpus-per-node={per_node}")
        return [*cmd, sys.executable, "-m", "pytest_kernelbench.rank", str(job_dir)]

    def start(self, job_dir: Path, nproc: int, env: dict[str, str], cwd: Path) -> SlurmRanks:
        step_env = dict(env)
        drop_job_options(step_env)
        step_env.update({k: os.environ[k] for k in KEEP if k in os.environ})
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "KB_RENDEZVOUS"):
            step_env.pop(k, None)
        step_env.pop(JOB_CGROUP_ENV, None)   # a step runs in Slurm's own cgroup, wherever its tasks land
        step_env["KB_LAUNCHER"] = "slurm"
        device = JobSpec.read(JobLayout(job_dir).job).device     # the item's: GPUs per node, or none
        return SlurmRanks(self.command(Path(job_dir), nproc, device), Path(job_dir), nproc, step_env, cwd)

    def close(self) -> None:
        pass


LAUNCHER = SlurmLauncher     # --kb-launcher=slurm (launch/registry.py finds it here)
