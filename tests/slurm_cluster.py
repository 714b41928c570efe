"""A real Slurm, simulated on this machine: one controller and two `slurmd -N n1/n2` "nodes" on
this host (per-node ports), with its own munge key and socket, all in a temporary folder.

Daemons run in the foreground (`-D`, `-F`) as children of the fixture and are killed by pid at
teardown; step daemons (slurmstepd double-forks away from slurmd) are found by the marker every
daemon of this cluster carries in its environment (KB_SLURM_CLUSTER=<folder>) and killed by pid
too. Where Slurm is not installed or does not come up, `SlurmCluster.start` raises
`SlurmUnavailable` (the fixture skips with its reason; it never fails).

What this cannot show (docs/slurm.md): NCCL over a network, proctrack/cgroup, NFS.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sinfo", "scancel")
UP_TIMEOUT_S = 30.0


class SlurmUnavailable(RuntimeError):
    """Slurm cannot run here (str(): why); tests skip."""


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _which(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None)


class SlurmCluster:
    def __init__(self, root: Path, nodes: tuple[str, ...] = ("n1", "n2"), cpus: int = 4, gpus: int = 2):
        self.root, self.nodes, self.cpus, self.gpus = Path(root), nodes, cpus, gpus
        self.procs: dict[str, subprocess.Popen] = {}
        self.host = socket.gethostname()
        self.conf = self.root / "etc" / "slurm.conf"
        self.munge_socket = self.root / "munge" / "munge.socket"

    # ---- environment a client (srun, sbatch, pytest inside an allocation) needs ------------------
    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        env["KB_SLURM_CLUSTER"] = str(self.root)     # marks every process of this cluster (stray())
        return env

    def start(self) -> SlurmCluster:
        if os.name != "posix" or os.geteuid() != 0:
            raise SlurmUnavailable("the simulated cluster runs its daemons as root (slurmd must start steps as any user)")
        tools = {name: _which(name) for name in ("munged", "slurmctld", "slurmd", "srun", "sinfo")}
        missing = [n for n, p in tools.items() if p is None]
        if missing:
            raise SlurmUnavailable(f"Slurm is not installed ({', '.join(missing)} missing; "
                                   "apt-get install slurmctld slurmd slurm-client munge)")
        self._write_config()
        denv = self.env
        try:
            self._spawn("munged", [tools["munged"], "-F", "--force", f"--key-file={self.root / 'munge' / 'munge.key'}",
                                   f"--socket={self.munge_socket}", f"--pid-file={self.root / 'munge' / 'munged.pid'}",
                                   f"--log-file={self.root / 'log' / 'munged.log'}",
                                   f"--seed-file={self.root / 'munge' / 'munged.seed'}"], denv)
            self._wait(lambda: self.munge_socket.exists(), "munged did not create its socket")
            self._spawn("slurmctld", [tools["slurmctld"], "-D", "-i", "-f", str(self.conf)], denv)
            for n in self.nodes:
                self._spawn(f"slurmd-{n}", [tools["slurmd"], "-D", "-N", n, "-f", str(self.conf)], denv)
            self._wait(self._nodes_idle, "the nodes did not come up idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _write_config(self) -> None:
        for sub in ("etc", "munge", "log", "state", "spool", "dev"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)     # munged refuses a group/other-writable path to its socket
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chmod(self.root / "munge", 0o700)
        ctl_port, *node_ports = _free_ports(1 + len(self.nodes))
        lines = [
            "ClusterName=kbsim", f"SlurmctldHost={self.host}(127.0.0.1)", f"SlurmctldPort={ctl_port}",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={self.root / 'state'}", f"SlurmdSpoolDir={self.root / 'spool' / '%n'}",
            f"SlurmctldPidFile={self.root / 'state' / 'slurmctld.pid'}",
            f"SlurmdPidFile={self.root / 'spool' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={self.root / 'log' / 'slurmd-%n.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides", "MpiDefault=none", "ReturnToService=2", "GresTypes=gpu",
            "SlurmctldTimeout=30", "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=5", "MinJobAge=5",
            "PlugStackConfig=/dev/null",
        ]
        gres = []
        for n, port in zip(self.nodes, node_ports):
            lines.append(f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={port} "
                         f"CPUs={self.cpus} RealMemory=1000 Gres=gpu:{self.gpus} State=UNKNOWN")
            dev = self.root / "dev" / n
            dev.mkdir(exist_ok=True)
            for g in range(self.gpus):      # fake GPUs: gres needs a device file, none is opened
                link = dev / f"nvidia{g}"
                if not link.is_symlink():
                    link.symlink_to("/dev/null")
            gres.append(f"NodeName={n} Name=gpu File={dev}/nvidia[0-{self.gpus - 1}]")
        lines.append(f"PartitionName=kb Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (self.root / "etc" / "gres.conf").write_text("\n".join(gres) + "\n")
        (self.root / "etc" / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")

    def _spawn(self, name: str, cmd: list[str | None], env: dict[str, str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen([str(c) for c in cmd], env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.root)
        log.close()

    def _wait(self, ok, what: str, timeout: float = UP_TIMEOUT_S) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise SlurmUnavailable(f"{', '.join(dead)} exited: {self.log_tail(dead[0])}")
            if ok():
                return
            time.sleep(0.1)
        raise SlurmUnavailable(f"{what} within {timeout:.0f} s: {self.log_tail('slurmctld')}")

    def _nodes_idle(self) -> bool:
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True, text=True)
        states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
        return all(states.get(n, "").startswith("idle") for n in self.nodes)

    def log_tail(self, name: str, lines: int = 5) -> str:
        found = []
        for p in (self.root / "log" / f"{name}.out", self.root / "log" / f"{name}.log"):
            try:
                found += p.read_text(errors="replace").strip().splitlines()[-lines:]
            except OSError:
                pass
        return " | ".join(found) or "(no log)"

    # ---- what a test asks -----------------------------------------------------------------------
    def run(self, cmd: list[str], timeout: float = 120.0, **kw) -> subprocess.CompletedProcess:
        env = {**self.env, **kw.pop("env", {})}
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, **kw)

    def stray(self, settle_s: float = 5.0) -> list[int]:
        """Processes this cluster started that are not its daemons (step daemons, tasks): should
        be none once every job ended. srun returns when the tasks are gone, while the step daemon
        may still be winding down for a moment: a process counts as stray only if it is still
        there after `settle_s`."""
        daemons = {p.pid for p in self.procs.values()}
        end = time.monotonic() + settle_s
        while True:
            left = [pid for pid in _marked(str(self.root)) if pid not in daemons and _ppid(pid) not in daemons]
            if not left or time.monotonic() > end:
                return left
            time.sleep(0.1)

    def stop(self) -> None:
        for name in reversed(list(self.procs)):     # slurmds first, then slurmctld, munged last
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        end = time.monotonic() + 10.0       # step daemons still winding down, killed until none is left
        while (left := _marked(str(self.root))) and time.monotonic() < end:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.1)
        self.procs.clear()


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _marked(root: str) -> list[int]:
    """Pids whose environment carries KB_SLURM_CLUSTER=root (every daemon of this cluster, and
    the step daemons and tasks they start)."""
    mark = f"KB_SLURM_CLUSTER={root}".encode()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue        # a zombie waiting for its parent: nothing runs
            with open(f"/proc/{d}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    found.append(int(d))
        except OSError:
            continue
    return found
