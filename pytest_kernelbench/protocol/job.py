"""What one job runs (JobSpec, TimingSpec), its folder's layout, the done mark, the exit facts and
the heartbeat record (standard library only)."""
from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from .vocabulary import PACKAGE_PARENT

class SpecError(ValueError):
    """A job.json that does not match JobSpec (a launcher and worker of different versions)."""


def _from_dict(cls, data: dict):
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise SpecError(f"{cls.__name__}: unknown field {unknown[0]!r}")
    return cls(**data)


@dataclass
class TimingSpec:
    enabled: bool = True
    rounds: int = 12             # rounded up to even (each side first equally often), at least 6; on GPUs
                                 # the least: more follow while the band is wide (max_rounds)
    warmup: int = 5
    # target length of one window: fewer calls a window, fewer slots a round fills and restores
    # (the self-check on one H100: 18-21 ms of the harness's own a round at 10 ms, 25-27 at 25 ms;
    # median cost per item 3.50-3.59 s against 3.91-4.26; reports/baselines/2026-11-27-roundlen.md)
    round_s: float = 0.010
    max_iters: int = 5000        # calls per round at most
    thread_wait_s: float = 10.0  # how long a round waits for the candidate's threads
    # every call of a window has an input slot of its own (rank/slots.py); a round fills up to
    # max_sets of them from the harness and the rest with copies of those
    max_sets: int = 64
    set_budget_bytes: int = 8 << 30      # the slots of a size and their pristine copy, at most
    # more rounds, in pairs, while the paired speedup's noise band (metrics.median_band) is wider
    # than +-band_target around its median, up to max_rounds (0: exactly `rounds`)
    band_target: float = 0.03
    max_rounds: int = 0

    @classmethod
    def for_device(cls, device: str, enabled: bool = True, rounds: int | None = None) -> "TimingSpec":
        # CPU runs check the protocol's logic (gloo numbers are not speed); GPU runs are the real thing
        base = cls(rounds=6, warmup=2, round_s=0.01, max_iters=200, max_sets=8) if device == "cpu" else cls(max_rounds=64)
        base.enabled = enabled
        if rounds:    # a count the user asked for is what runs
            base.rounds, base.max_rounds = rounds, 0
        return base


@dataclass
class JobSpec:
    token: str                   # KB_JOB_TOKEN: marks every process of the job
    problem: str                 # "<category>/<name>"
    harness_path: str
    reference_path: str
    candidate_path: str
    problem_dir: str
    device: str                  # cpu | cuda
    dtype: str
    sizes: dict                  # name -> the size's configuration
    size_order: list
    protected: list = field(default_factory=list)   # folders the candidate may not read
    trials: int = 2
    forbid: list = field(default_factory=list)      # API families (problem.FORBID_FAMILIES)
    inplace: bool = False
    tolerance: dict = field(default_factory=lambda: {"atol": 1e-4, "rtol": 1e-4})
    timing: TimingSpec = field(default_factory=TimingSpec)
    pg_timeout_s: float = 20.0   # short, so a hang after the first call surfaces fast
    compile_timeout_s: float = 600.0
    allow_multicast: bool = False
    native_lib: str | None = None    # native problems: the built library, which glue.py drives
    glue_path: str | None = None     # native problems: the glue (calls the library from solution())
    sys_path: list = field(default_factory=list)     # more import paths for the candidate (PKB's utils shim)
    builds: list = field(default_factory=list)       # build caches the candidate may write (torch extensions, Triton)
    nodes: int = 1               # nodes the ranks span (--kb-nodes): ranks per node = world // nodes
    shared_gpus: int = 0         # --kb-oversubscribe: the GPUs W ranks share (0: one GPU per rank)
    baselines: dict = field(default_factory=dict)    # name -> file: timed beside the reference (spec/baselines.py)

    def gpu_of(self, local_rank: int) -> int:
        """The GPU a rank's processes use: its local rank, or on a shared placement its local rank
        modulo the GPUs it shares (ranks spread evenly over them)."""
        return local_rank % self.shared_gpus if self.shared_gpus else local_rank

    @property
    def backend(self) -> str:
        """Both process groups' backend: NCCL on GPUs of their own, gloo on CPU and where ranks share
        a GPU (NCCL refuses two ranks on one device; gloo carries CUDA tensors for collectives)."""
        return "nccl" if self.device == "cuda" and not self.shared_gpus else "gloo"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "JobSpec":
        data = dict(data)
        data["timing"] = _from_dict(TimingSpec, data.get("timing") or {})
        return _from_dict(cls, data)

    def write(self, path: Path) -> None:
        atomic_write(path, json.dumps(self.to_dict(), indent=1))

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> "JobSpec":
        with open(path) as f:
            return cls.from_dict(json.load(f))


class JobLayout:
    """The job folder: what the launcher writes, what each checker writes, what is trusted, and
    the two corners a candidate process may reach (everything else is out of its sandbox).

        job.json            the JobSpec (launcher)
        hb/rank<R>          "<unix time> <phase>" (heartbeat, by the checker; heartbeat_record)
        hb/pids<R>          "<checker pid> <candidate pid>" (what the launcher watches for compiles)
        logs/rank<R>.log    the candidate process's stdout+stderr (its prints, its stack when stopped)
        logs/checker<R>.log the checker's own; logs/torchrun.log torchrun's (a launcher's own log)
        logs/exits.json     how each rank ended (ExitFacts), written by every launcher
        error/rank<R>.json  why the rank gave up: {rank, category, message, where, traceback, time}
        done/rank<R>        done_mark() of the job: the checker finished the protocol
        result.json         rank 0's result once every rank finished
        candidate/          what the candidate process may read: its source (and a native
                            problem's library and glue)
        scratch/rank<R>/    the candidate process's home, temporary and cache folder (read-write)
        cwd/, tmp/          the checkers' working and temporary folders
    """

    SUBDIRS = ("hb", "logs", "error", "done")

    TORCHRUN_LOG = "torchrun.log"      # torchrun's own output, under logs/

    def __init__(self, job_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(job_dir)
        self.job = self.dir / "job.json"
        self.result = self.dir / "result.json"
        self.cwd = self.dir / "cwd"
        self.tmp = self.dir / "tmp"
        self.hb, self.logs, self.errors, self.marks = (self.dir / sub for sub in self.SUBDIRS)
        self.candidate = self.dir / "candidate"
        self.exits = self.logs / "exits.json"
        self.torchrun_log = self.logs / self.TORCHRUN_LOG
        self.secret = self.dir / "secret"     # an older launcher's key file: still refused to candidates

    def subdirs(self) -> tuple[Path, ...]:
        """The folders every checker makes (hb/, logs/, error/, done/)."""
        return (self.hb, self.logs, self.errors, self.marks)

    def control_dirs(self) -> tuple[Path, ...]:
        """What the checkers write and the launcher trusts: no candidate may touch them."""
        return (self.marks, self.errors, self.hb)

    def control_files(self) -> tuple[Path, ...]:
        return (self.job, self.result, self.secret)

    def heartbeat(self, rank: int) -> Path:
        return self.hb / f"rank{rank}"

    @staticmethod
    def control(token: str) -> str:
        """The launcher's socket (abstract, so no path length limit) where each checker gets the job's
        key and input nonce, in memory, never as a file (keyservice.py)."""
        return f"\0kb-control-{token}"

    def pids(self, rank: int) -> Path:
        return self.hb / f"pids{rank}"

    def log(self, rank: int) -> Path:
        return self.logs / f"rank{rank}.log"

    def checker_log(self, rank: int) -> Path:
        return self.logs / f"checker{rank}.log"

    def scratch(self, rank: int) -> Path:
        return self.dir / "scratch" / f"rank{rank}"

    def reference_log(self, rank: int) -> Path:
        """The reference process's output (the trusted twin of the candidate process that times the
        reference through the same batch protocol)."""
        return self.logs / f"reference{rank}.log"

    def reference_scratch(self, rank: int) -> Path:
        return self.dir / "scratch" / f"reference{rank}"

    def solver_tmp(self, role: str) -> Path:
        """TMPDIR of every solver process of one role ("candidate", "reference") of the job on this
        host: one folder for all ranks, since torch's symmetric-memory rendezvous sends a CUDA
        handle to a peer's socket at $TMPDIR/symm_mem-<its pid>, which a TMPDIR per rank never
        finds; and a short path outside the job folder, since a socket's path holds at most 107
        bytes (a deep report folder would refuse it)."""
        digest = hashlib.sha256(os.path.abspath(self.dir).encode()).hexdigest()[:16]
        return Path("/tmp") / f"kb-{digest}-{role}"

    def error(self, rank: int) -> Path:
        return self.errors / f"rank{rank}.json"

    def done(self, rank: int) -> Path:
        return self.marks / f"rank{rank}"


def done_mark(key: str | None, token: str, rank: int, result_bytes: bytes = b"") -> str:
    """What done/rank<R> holds: an HMAC, under the job's secret key, of the token, the rank and
    (rank 0) the bytes of result.json. Without a key (an old launcher), the token."""
    if not key:
        return token
    msg = f"{token}|done|{rank}|{hashlib.sha256(result_bytes).hexdigest()}".encode()
    return hmac.new(key.encode(), msg, hashlib.sha256).hexdigest()


@dataclass
class ExitFacts:
    """How a job's ranks ended, as its launcher saw them: logs/exits.json, one format for every
    launcher (fork, torchrun, slurm...), the only exit facts outcome/ reads."""
    launcher: str                                             # its name (--kb-launcher)
    exits: dict[int, int] = field(default_factory=dict)       # rank -> exit code (-N: signal N); unknown: absent
    root_cause: int | None = None                             # the first rank that failed
    hosts: dict[int, str] = field(default_factory=dict)       # rank -> host it ran on
    pids: dict[int, int] = field(default_factory=dict)        # rank -> its pid there
    step: str | None = None                                   # Slurm: "<job>.<step>" that ran the ranks
    log: str | None = None     # the launcher's own log under logs/ (shown when no rank's log says why)

    def failed(self) -> dict[int, int]:
        """The ranks that exited non-zero."""
        return {r: c for r, c in self.exits.items() if c != 0}

    def write(self, path: str | os.PathLike[str]) -> None:
        data = asdict(self)
        for k in ("exits", "hosts", "pids"):
            data[k] = {str(r): v for r, v in sorted(data[k].items())}
        atomic_write(path, json.dumps(data, indent=1))

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> ExitFacts | None:
        """None when the file is missing or unreadable (the launcher could not write it)."""
        try:
            data = json.loads(Path(path).read_text())
            for k in ("exits", "hosts", "pids"):
                data[k] = {int(r): v for r, v in (data.get(k) or {}).items()}
            data["exits"] = {r: int(c) for r, c in data["exits"].items()}
            return _from_dict(cls, data)
        except (OSError, ValueError, TypeError, AttributeError, SpecError):
            return None


def atomic_write(path: str | os.PathLike[str], text: str) -> None:
    """Readers see the old file or the new one, never half of one (a temporary file beside it,
    named per process, then rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


HEARTBEAT_BYTES = 1024


def heartbeat_record(seq: int, stamp: float, phase: str) -> bytes:
    """A heartbeat as the checker writes it, over the last in place (one pwrite: a rename per beat
    cost ~0.5 ms, and a timed round writes three): fixed length, the sequence number at both ends,
    so a reader that caught a write halfway sees them differ (heartbeat_text)."""
    text = f"{seq}\t{stamp:.3f} {phase.replace(chr(9), ' ')[:HEARTBEAT_BYTES - 64]}\t{seq}\n"
    return text.encode(errors="replace")[:HEARTBEAT_BYTES - 1].ljust(HEARTBEAT_BYTES, b" ")


def heartbeat_text(data: bytes) -> str | None:
    """"<unix time> <phase>" of a heartbeat file; None for a record caught halfway through a write.
    A plain "<unix time> <phase>" file (no sequence numbers) is taken as it is."""
    text = data.decode(errors="replace").strip()
    parts = text.split("\t")
    if len(parts) == 1:
        return text
    if len(parts) != 3 or parts[0] != parts[2]:
        return None
    return parts[1]


def range_list(text: str) -> list[int]:
    """A Linux / Slurm range list ("0-2,5": sysfs CPU lists, srun's task lists) as [0, 1, 2, 5]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if part:
            a, _, b = part.partition("-")
            out += range(int(a), int(b or a) + 1)
    return out


def child_pythonpath(env: Mapping[str, str] | None = None) -> str:
    """PYTHONPATH for a child process that must import this package (the job's ranks, the shape
    probe, the calibration): the package's parent first, then what was there."""
    current = (os.environ if env is None else env).get("PYTHONPATH", "")
    rest = [p for p in current.split(os.pathsep) if p and p != PACKAGE_PARENT]
    return os.pathsep.join([PACKAGE_PARENT, *rest])


