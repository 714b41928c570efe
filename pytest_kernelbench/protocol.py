"""The contract between the pytest process and the rank processes. Standard library only: both
sides import it (the ranks before torch), and `python -c "import pytest_kernelbench.protocol"`
works anywhere.

- `Failure` and `Outcome`: every category a record can carry, used by every producer and by the
  metrics; `RULES`, the checks stricter than ParallelKernelBench's that a failure may name.
- `JobSpec` (with `TimingSpec`): what one torchrun job runs, written as job.json by the launcher
  and read by every rank; one set of defaults, unknown fields refused.
- The job folder's layout (`JobLayout`), the done mark that makes a result trusted, the heartbeat
  mark of setup time, and the two small helpers both sides need (atomic writes, the child
  PYTHONPATH).
"""
from __future__ import annotations

import enum
import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
# marks a heartbeat phase whose time is on the compile budget, not the item's deadline
SETUP_MARK = "(first call: setup/compile)"
# what every job's processes get so that NCCL, torch symmetric memory and NVSHMEM never use NVLink
# multicast (it can take a shared host's GPUs out of service), and the variables a candidate may
# not change (checked in its process, through os.environ and libc, and from outside it)
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
GUARDED_ENV = (*MULTICAST_OFF, "CUDA_VISIBLE_DEVICES")
# the shared-device placement (--kb-oversubscribe, docs/one-gpu.md): several ranks on one GPU. torch's
# own switch lets symmetric memory rendezvous ranks whose devices overlap (refused otherwise); NCCL
# refuses two ranks on one device, so both process groups go over gloo. Never timed: what such a run
# says, on every surface (record.speed, the table, the leaderboard, compare)
SHARED_ENV = {"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1"}
SHARED_PLACEMENT = "shared"
SHARED_NO_SPEED = "shared GPU: correctness only, no speed"


class Outcome(enum.StrEnum):
    """An item's outcome. StrEnum: a member is its value in str(), f-strings, JSON and comparisons."""
    PASSED = "passed"
    FAILED = "failed"       # the candidate's doing: one Failure category
    ERROR = "error"         # no result, for a reason that is not the candidate's (still counted)
    SKIPPED = "skipped"     # cannot run here; counted apart, with its reason


# outcomes whose items count in every rate (skipped items are counted apart)
COUNTED = (Outcome.PASSED, Outcome.FAILED, Outcome.ERROR)
# the skip reason of a problem --kb-solutions-only leaves out (the table lists such items as one line)
SOLUTIONS_ONLY_SKIP = "no file for it in --kb-solutions (--kb-solutions-only)"


class Tier(enum.StrEnum):
    """The speed verdict of a passed item."""
    BETTER = "better"
    ON_PAR = "on_par"
    DEGRADED = "degraded"
    SEVERELY_DEGRADED = "severely_degraded"


# speed verdict tiers: (name, lowest speedup of the tier), best first; a score whose noise band
# holds 1.0 is on_par whatever its value (metrics.verdict)
TIERS = ((Tier.BETTER, 1.20), (Tier.ON_PAR, 0.95), (Tier.DEGRADED, 0.60), (Tier.SEVERELY_DEGRADED, 0.0))
SLOW_TIERS = frozenset({Tier.DEGRADED, Tier.SEVERELY_DEGRADED})
GOOD_TIERS = frozenset({Tier.BETTER, Tier.ON_PAR})


def tier(score: float | None) -> Tier | None:
    if score is None:
        return None
    for name, lower in TIERS:
        if score >= lower:
            return name
    return TIERS[-1][0]


class Failure(enum.StrEnum):
    """An item's failure category (outcome failed: the candidate's; outcome error: not its own)."""
    # the candidate's
    NO_CODE = "no_code"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    CRASH = "crash"
    MISMATCH = "mismatch"
    TIMEOUT = "timeout"
    FORBIDDEN_CALL = "forbidden_call"
    UNSAFE = "unsafe"
    EDIT_OUTSIDE_REGION = "edit_outside_region"     # native: a change outside the template's EDIT regions
    FORBIDDEN_CONSTRUCT = "forbidden_construct"     # native: region code reaching outside (header, system(), asm, ...)
    REFERENCE_COPY = "reference_copy"   # the problem's own reference handed back (candidates/copies.py): no effort
    # not the candidate's (outcome error)
    API_ERROR = "api_error"
    INVALID_PROBLEM = "invalid_problem"
    HARNESS_ERROR = "harness_error"


NOT_THE_CANDIDATES = frozenset({Failure.API_ERROR, Failure.INVALID_PROBLEM, Failure.HARNESS_ERROR})
CANDIDATE_FAILURES = tuple(f for f in Failure if f not in NOT_THE_CANDIDATES)


class Disposition(enum.StrEnum):
    """Whose outcome a record is: a verdict on the candidate, or none (for a trainer: a retryable
    record is run again, never scored as a zero; for a leaderboard: counted apart)."""
    VALID = "valid"            # passed, or failed for one of CANDIDATE_FAILURES: the candidate's
    RETRYABLE = "retryable"    # the infrastructure's (harness_error, api_error, invalid_problem, a lost GPU,
                               # the deadline met while queued): no verdict on the candidate
    SKIPPED = "skipped"        # cannot run here (no GPU, a world size that does not fit): not the candidate's


def disposition_of(outcome: object) -> Disposition:
    """The one rule: an outcome of PASSED or FAILED is the candidate's; ERROR (or none: the item
    ended without a result) the infrastructure's; SKIPPED neither's."""
    if outcome in (Outcome.PASSED, Outcome.FAILED):
        return Disposition.VALID
    return Disposition.SKIPPED if outcome == Outcome.SKIPPED else Disposition.RETRYABLE


# the categories whose job log tail says why (the candidate's own prints and stack): shown in the
# pytest failure text and in the model's feedback
SHOWS_LOG_TAIL = frozenset({Failure.CRASH, Failure.RUNTIME_ERROR, Failure.COMPILE_ERROR, Failure.TIMEOUT})


# what a candidate process may name as its own failure (Failed, Done.failed): its account is read,
# never trusted, so anything else it names (harness_error, an unknown word) is its runtime_error
SELF_REPORTED = frozenset({Failure.COMPILE_ERROR, Failure.RUNTIME_ERROR, Failure.FORBIDDEN_CALL, Failure.UNSAFE})


def reported_category(category: object) -> Failure:
    """The category a candidate process's own account of its failure gives: only its own."""
    if isinstance(category, str) and category in SELF_REPORTED:
        return Failure(category)
    return Failure.RUNTIME_ERROR


def outcome_of(category: str) -> Outcome:
    """The outcome a failure category gives: failed when it is the candidate's doing, else error."""
    return Outcome.FAILED if category in CANDIDATE_FAILURES else Outcome.ERROR

# Rules stricter than ParallelKernelBench's own check (allclose after a cast to float, dtype and
# barriers free): a failure message caused only by one of them ends with "(rule: <name>)", and
# the item's record carries it as record["rule"], so PKB-comparable numbers can be read off a report.
RULES = {
    "exact_integers": "integer and bool outputs must match exactly (PKB: allclose at the tolerance)",
    "dtype": "output dtypes must match the reference's (PKB: compares values only)",
    "forbidden_barrier": "dist.barrier() is a forbidden collective (PKB's prompt example calls it)",
}


def tagged(message: str, rule: str) -> str:
    return f"{message} (rule: {rule})"


def rule_of(message: str | None) -> str | None:
    """The rule a failure message says it failed only by, if any."""
    if message and message.endswith(")") and "(rule: " in message:
        name = message.rsplit("(rule: ", 1)[1][:-1]
        return name if name in RULES else None
    return None


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


# ---- inside a rank: the checker (trusted) and its candidate process (rank/) ---------------------
# Typed messages over the socketpair between them (rank/channel.py frames them as JSON). What the
# candidate process sends is never trusted: the checker reads outputs and inputs itself.
class Isolation(enum.StrEnum):
    """The protections in force in a candidate process, as the report names them."""
    PROCESS = "process"              # its own process: no harness, reference, secret or verdict in it
    CAPS = "caps"                    # every capability dropped, no_new_privs
    LANDLOCK = "landlock"            # read-only system/Python trees, writes only to its scratch and caches
    SIGNALS = "signal-scope"         # Landlock: it cannot signal processes outside its sandbox
    NONDUMPABLE = "nondumpable"      # checker and zygote: no /proc/<pid>/mem for it
    MOUNTNS = "mountns"              # a mount namespace of its own: only the folders it needs, under closed ones
    DEVICES = "devices"              # Landlock: only the device nodes it needs; /proc and /sys read-only
    UID = "uid"                      # a uid/gid of its own per job (not 0, not the reference's): owns nothing of the system
    SEALED_ENV = "sealed-env"        # its multicast switches read-only and sealed (rank/sealenv.py), seen from outside


# an error that only says a rank waited for its peers in vain (they stopped or died): the cause is
# elsewhere (outcome/ blames the rank that stopped; a reference that met it is not at fault)
PEER_LOST = re.compile(r"timed out|timeout|connection (?:closed|reset)|broken pipe|watchdog|communicator was "
                       r"aborted|remote process exited|ncclRemoteError|peers did not|DistNetworkError|DistStoreError",
                       re.I)


class Containment(enum.StrEnum):
    """How a job's processes are kept together and ended (contain.py), as the report's header says."""
    CGROUP = "cgroup"                # a cgroup v2 per job, killed whole (cgroup.kill) at its end
    SCAN = "scan"                    # /proc scans (token, sessions, ancestry) and our own orphans, killed


@dataclass
class CandidateInit:
    rank: int
    world: int
    device: str                      # cpu | cuda
    local_rank: int                  # its GPU index on this node (JobSpec.gpu_of: the local rank, or a shared GPU)
    store_port: int                  # the candidate group's store (served by the candidate of rank 0)
    pg_timeout_s: float
    setup_timeout_s: float           # the first call of each size may wait this long in a collective
    forbid: list
    allow_multicast: bool
    protected: list
    candidate_path: str
    native_lib: str | None = None
    glue_path: str | None = None
    sizes: dict = field(default_factory=dict)
    dtype: str = "float32"
    job_dir: str = ""                # for the in-process file shield (the sandbox refuses it anyway)
    store_host: str = "127.0.0.1"    # where that store is: rank 0's node when the ranks span nodes (launch/slurm.py)
    backend: str = ""                # the group's backend (JobSpec.backend; "": nccl on CUDA, gloo on CPU)


@dataclass
class Ready:                         # hardened, waiting for CandidateInit
    pid: int
    layers: list


@dataclass
class StorePort:                     # the candidate of rank 0: where its group's store listens
    port: int


@dataclass
class Imported:
    import_s: float


@dataclass
class Failed:                        # the candidate process cannot go on (its own account)
    category: str
    message: str
    traceback: str = ""


@dataclass
class Arena:                         # shared input memory: CPU memfd (passed as fd) or a CUDA IPC handle
    id: int
    device: str
    nbytes: int
    handle: str = ""                 # hex of the 64-byte CUDA IPC handle


@dataclass
class Sets:                          # the input sets of a size, as trees over arenas (rank/memory.py)
    sets: list


@dataclass
class Batch:                         # call solution() on these sets, in order; outputs held until Release
    calls: list
    first: bool = False              # the size's first call: setup (compile, rendezvous), long timeouts
    spin: bool = False               # wait for "go" and mark "done" by spinning on the control page
    inputs: bool = False             # in-place problems: the sets rebuilt from the lent memory before the
                                     # calls, and described after them (a list element may be rebound)


@dataclass
class Done:                          # a batch's end, written to the control page before "done" is marked
    outputs: list                    # one per call, pointers into the candidate's memory: a tree, or [k, p]
    layouts: list = field(default_factory=list)     # for a plain tensor at p of layouts[k] (outputs.describe_calls)
    segments: list = field(default_factory=list)    # CUDA: [base, size, ipc handle hex] not announced before
    forbidden: dict = field(default_factory=dict)   # forbidden API calls seen in-process (best effort)
    unsafe: str | None = None        # multicast tried or enabled (in-process guard)
    state: list = field(default_factory=list)       # global torch state left changed by the calls
    threads: list = field(default_factory=list)     # Python threads still running after the calls
    lent: list = field(default_factory=list)        # CUDA: where it mapped the arenas it was lent, [base, nbytes, id]
    failed: dict | None = None       # a Failed, as a dict: the batch raised
    inputs: list = field(default_factory=list)      # Batch.inputs: each call's input set after it, as outputs are
    stamps: list = field(default_factory=list)      # diagnostics only, never trusted: perf_counter at go seen,
                                                    # calls issued, device synchronized, Done written
    probe_s: float | None = None     # CUDA: seconds a one-element kernel took just before "armed" (foreign.py)


@dataclass
class Release:
    pass


@dataclass
class Exit:
    pass


MESSAGES = {cls.__name__: cls for cls in (CandidateInit, Ready, StorePort, Imported, Failed, Arena, Sets, Batch,
                                           Done, Release, Exit)}


def encode(msg: object) -> bytes:
    # fields shallowly (a nested dataclass through `default`): asdict deep-copies every output's
    # description, 16 us an output, which a timed window of 400 calls paid at its end
    body = {f.name: getattr(msg, f.name) for f in fields(msg)}   # type: ignore[arg-type]
    return json.dumps({"kind": type(msg).__name__, **body}, default=_plain).encode()


def _plain(obj: object) -> object:
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    raise TypeError(f"{type(obj).__name__} is not plain data")


# a message field's declared type, checked at decode (a candidate's message is never trusted: a
# string where a number is declared must not raise later, inside the checker)
_PLAIN = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "list": (list,), "dict": (dict,)}


def _typed(cls: type, obj: object) -> None:
    for f in fields(cls):
        if f.name not in obj:        # type: ignore[operator]
            continue
        declared = str(f.type).split(" | ")
        v = obj[f.name]              # type: ignore[index]
        if v is None and "None" in declared:
            continue
        kinds = [k for d in declared if d != "None" for k in _PLAIN.get(d, (object,))]
        if not any(type(v) is k or (k is object) for k in kinds):
            raise SpecError(f"{cls.__name__}.{f.name}: a {type(v).__name__}, declared {f.type}")


def decode(data: bytes) -> object:
    """A message from bytes; SpecError for anything that is not one (never trusted input: nesting
    too deep for the parser, a field of the wrong type, an unknown kind or field)."""
    try:
        obj = json.loads(data)
        cls = MESSAGES[obj.pop("kind")]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise SpecError(f"not a message: {type(e).__name__}") from None
    _typed(cls, obj)
    try:
        return _from_dict(cls, obj)
    except TypeError as e:       # a field missing
        raise SpecError(f"not a {cls.__name__}: {e}") from None
