"""Inside a rank: the checker <-> candidate-process messages and the protections' names
(standard library only)."""
from __future__ import annotations

import enum
import json
import re
from dataclasses import asdict, dataclass, field, fields, is_dataclass

from .job import SpecError, _from_dict

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
    baselines: dict = field(default_factory=dict)   # the reference process only: name -> file of each baseline


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
    module: str = ""                 # the reference process only: the baseline it calls ("": the reference)


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
