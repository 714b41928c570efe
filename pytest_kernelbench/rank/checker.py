"""The checker: the trusted half of a rank (forked by the rank server, or started by torchrun as
`python -m pytest_kernelbench.rank JOB_DIR`).

It forks its candidate process first, while it holds nothing secret, then gets the job's key and
input nonce from the launcher in memory, joins the checkers' process group, loads the hidden
harness and the reference, and drives the candidate: for each size, trials (fresh rank-dependent
inputs lent to the candidate, its outputs read back by the checker, the reference run here on its
own copy, compared here), then side-by-side timing (timing.py; outputs of timed calls checked on a
subset the checker picks after each window) and the anti-caching passes (sizes.py). Verdicts are
agreed across checkers; rank 0 writes the signed result.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import json
import os
import socket
import sys
import time
from typing import Any, NoReturn

from ..procs import mark
from ..protocol import PEER_LOST, CandidateInit, Failure, Isolation, JobLayout, JobSpec, Outcome
from . import exchange, sandbox, solvers, stores
from .cuda import context_on_thread, pci_address
from .envwatch import EnvWatch
from .failures import AgreedFailure, ItemFailed
from .files import JobFiles, load_module
from .link import Link

KEY_TIMEOUT_S = 60.0


class Checker:
    def __init__(self, job_dir: str, step_io: Any = None):
        self.step_io = step_io     # a task of a Slurm step: key and rendezvous on its stdin (steps.py)
        self.layout = JobLayout(job_dir)
        self.job = JobSpec.read(self.layout.job)
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self.gpu = self.job.gpu_of(self.local_rank)     # its GPU: the local rank, or a shared one (--kb-oversubscribe)
        self.files = JobFiles(job_dir, self.rank, self.job.token)
        self.files.redirect_output()
        self.phases: dict[str, float] = {}
        self.warnings: list[str] = []
        self.link: Link | None = None
        self.ref: Link | None = None       # the reference process (timing only)
        self.ref_scheduling: dict = {}
        self.watch: EnvWatch | None = None
        self.key = ""
        self.nonce = ""
        self.driver: Any = None
        self.arenas: dict[int, Any] = {}
        self.isolation: list[str] = []
        self.cores: dict | None = None         # rank 0's pinning (cores.py), for the report
        self._gen: Any = None

    # ---- before anything secret: the candidate process and the reference process ------------------
    def start_candidate(self) -> None:
        """Fork the candidate process and (when timing) the reference process, its twin that times
        the reference through the same batch protocol: both side by side, each in the same kind of
        hardened process (rank/solvers.py)."""
        self.link, self.ref = solvers.start(self.layout, self.job, self.rank, self.gpu)
        self.files.pids(os.getpid(), self.link.pid, self.ref.pid if self.ref else 0)
        if not self.job.allow_multicast and os.environ.get("KB_DEV_NO_WATCH") != "1":
            pids = [self.link.pid] + ([self.ref.pid] if self.ref else [])     # both: a window costs both alike
            self.watch = EnvWatch(pids, 0.02 if self.job.device == "cuda" else 0.05)
            self.link.own.add(self.watch.watcher)
            self.files.pids(os.getpid(), self.link.pid, self.ref.pid if self.ref else 0, self.watch.watcher)

    def fetch_secret(self) -> None:
        """The job's key and input nonce, from the launcher's socket: it answers only the checkers
        it started (by pid), so the candidate process, forked before, never had them."""
        self._take_secret(self.step_io.line(KEY_TIMEOUT_S) if self.step_io is not None else
                          ask_secret(JobLayout.control(self.job.token), self.rank, KEY_TIMEOUT_S))

    def _take_secret(self, secret: dict) -> None:
        self.key, self.nonce = secret.get("key", ""), secret.get("nonce", "")
        if not self.key:
            raise ItemFailed(Failure.HARNESS_ERROR, "the launcher did not hand this checker the job's key", "harness")
        self.files.key = self.key

    # ---- setup ---------------------------------------------------------------------------------------
    def setup(self) -> None:
        """The checkers' store, then the solver processes told to join their groups and import
        (they do so while this checker joins its own group and loads the harness), then the
        checkers' group and the hidden harness and reference."""
        t0 = time.perf_counter()
        sandbox.nondumpable()
        from ..procs import become_subreaper
        become_subreaper()       # what the candidate's children leave behind comes back to us
        self.files.heartbeat("init process group")
        import torch
        import torch.distributed as dist
        self.torch = torch
        job = self.job
        timeout = datetime.timedelta(seconds=float(job.pg_timeout_s))
        # the checker's context made while its solver processes make theirs (rank/cuda.py)
        context = context_on_thread(torch, self.gpu) if job.device == "cuda" else None
        # under a prefix only holders of the job's key know (stores.private): not the candidates
        self.store = stores.private(stores.open_store(self.rank, self.world, timeout, self.step_io,
                                                      float(job.compile_timeout_s)), self.key)
        mark("checker: store")
        self.start_solvers()
        if context is not None:
            context()
            mark("checker: context")
            torch.cuda.set_device(self.gpu)
            self.device = torch.device("cuda", self.gpu)
        else:
            torch.set_num_threads(1)
            self.device = torch.device("cpu")
        backend = job.backend       # gloo where ranks share a GPU: NCCL refuses two ranks on one device
        kwargs: dict[str, Any] = {"device_id": self.device} if backend == "nccl" else {}
        dist.init_process_group(backend, timeout=timeout, store=self.store, rank=self.rank, world_size=self.world,
                                **kwargs)
        mark("checker: group")
        from . import p2pstage
        p2pstage.serve(backend, job.device == "cuda")     # the reference's CUDA point-to-point, on a shared GPU
        self.dtype = getattr(torch, job.dtype)
        from . import memory
        assert self.link is not None
        if job.device == "cuda":      # a CUDA problem's outputs may hold CPU tensors too
            from .cuda import Driver
            self.driver = Driver()
            self.link.reader = memory.Readers(memory.ProcReader(self.link.pid), memory.IpcReader(self.driver, self.device))
            if self.ref is not None:    # its timed windows' outputs are read as the candidate's are (rank/timed.py)
                self.ref.reader = memory.IpcReader(self.driver, self.device)
        else:
            self.link.reader = memory.ProcReader(self.link.pid)
        self.files.heartbeat("load harness and reference")
        self.harness = load_module(job.harness_path, f"_kb_h_{os.urandom(6).hex()}", register=False)
        self.reference = load_module(job.reference_path, f"_kb_r_{os.urandom(6).hex()}", register=False)
        self.shared_seed = _takes(getattr(self.harness, "inputs", None), "shared_seed")
        self.phases["init_s"] = time.perf_counter() - t0

    def agree(self, obj: object) -> list:
        """Every checker's plain-data `obj`, signed with the job's key (the store is reachable by
        candidate processes; a forged entry is refused)."""
        return exchange.all_gather(obj, "agree", key=self.key, store=self.store)

    def agree_max(self, x: float) -> float:
        return max(self.agree(float(x)))

    def barrier(self) -> None:
        if self.world == 1:       # no peer to wait for (NCCL's barrier is a collective and a sync: ~1 ms)
            return
        import torch.distributed as dist
        dist.barrier()

    def store_barrier(self, name: str, timeout_s: float, what: str) -> None:
        key = f"kb/{self.job.token}/{name}"
        self.store.add(key, 1)
        deadline = time.monotonic() + timeout_s
        while self.store.add(key, 0) < self.world:
            if time.monotonic() > deadline:
                self.die(Failure.TIMEOUT, f"peers did not {what} within {timeout_s:.0f} s", "candidate")
            time.sleep(0.02)

    def sync(self) -> None:
        if self.job.device == "cuda":
            self.torch.cuda.synchronize()

    def batch_timeout(self) -> float:
        """How long the checker waits for one batch: past any deadline, so the launcher's deadline
        (which stops every rank and names where each was) always comes first."""
        return float(self.job.compile_timeout_s) + 3600.0

    def next_arena(self) -> int:
        return max(self.arenas, default=-1) + 2       # ids in pairs: one per device type

    def arena_ranges(self, lent: list) -> list[tuple[int, int]]:
        """Where the candidate mapped the arenas it was lent: CPU, from its /proc maps; CUDA, as it
        says (`lent`: where it claims them; a false claim points only at other inputs)."""
        if self.link is None:
            return []
        # the maps of a CUDA process run to thousands of lines: read only where a CPU arena was lent
        cpu = any(a.device.type == "cpu" for a in self.arenas.values())
        ranges = self.link.reader.mapped("memfd:kb-arena") if cpu else []
        if self.job.device == "cuda":
            ranges += [(int(b), int(b) + int(n)) for b, n, _ in lent]
        return ranges

    def die(self, category: str, message: str, where: str, exc: BaseException | None = None) -> NoReturn:
        raise ItemFailed(category, message, where, exc)

    def start_solvers(self) -> None:
        """Both solver processes told to join their groups (rank 0's serve their stores, published
        on the checkers' store) and import; the checker does not wait for them here."""
        assert self.link is not None
        job = self.job
        budget = float(job.compile_timeout_s) + 30
        self.isolation = self.link.ready()
        init = CandidateInit(rank=self.rank, world=self.world, device=job.device, local_rank=self.gpu,
                             store_port=0, pg_timeout_s=job.pg_timeout_s, setup_timeout_s=budget, forbid=list(job.forbid),
                             allow_multicast=job.allow_multicast, protected=list(job.protected),
                             candidate_path=job.candidate_path, native_lib=job.native_lib, glue_path=job.glue_path,
                             sizes=job.sizes, dtype=job.dtype, job_dir=str(self.layout.dir),
                             backend=job.backend)
        port_key = f"kb/{job.token}/candidate-store"
        if self.rank != 0:     # "<host> <port>": rank 0's node, when the ranks span nodes
            init.store_host, init.store_port = self.published(port_key)
        here = "127.0.0.1"
        if self.step_io is not None:
            from .steps import reachable_address
            here = reachable_address()
        self.link.init(init, publish_port=lambda port: self.store.set(port_key, stores.seal(self.key, port_key,
                                                                                            f"{here} {port}")))
        if self.ref is not None:        # the reference process joins a group of its own, like the candidates'
            self.ref.ready()
            # no forbidden-API guards: they wrap the very collectives a reference makes, and an honest
            # candidate, which makes none, would be timed against a reference slowed by them
            ref_init = dataclasses.replace(init, candidate_path=os.path.abspath(job.reference_path), native_lib=None,
                                           glue_path=None, forbid=[], baselines=dict(job.baselines))
            ref_key = f"kb/{job.token}/reference-store"
            if self.rank != 0:
                ref_init.store_host, ref_init.store_port = self.published(ref_key)
            self.ref.init(ref_init, publish_port=lambda port: self.store.set(ref_key, stores.seal(self.key, ref_key,
                                                                                                f"{here} {port}")))

    def published(self, name: str) -> tuple[str, int]:
        """Where rank 0's checker says a solver group's store is ("<host> <port>", sealed with the key)."""
        value = stores.unseal(self.key, name, self.store.get(name).decode())
        if value is None:   # only a process that read the checkers' store could: a candidate process
            self.die(Failure.FORBIDDEN_CALL, f"the checkers' store was written by a process without the job's key "
                     f"({name.rsplit('/', 1)[-1]})", "candidate")
        host, port = value.split()
        return host, int(port)

    def import_candidate(self) -> None:
        assert self.link is not None
        self.files.heartbeat("import candidate")
        budget = float(self.job.compile_timeout_s) + 30
        import_s = self.link.imported(budget)
        self.phases["import_s"] = import_s
        if self.ref is not None:
            try:
                self.ref.imported(budget)
            except ItemFailed as f:
                raise ItemFailed(Failure.HARNESS_ERROR, f"the reference process: {f.message}", "reference", tb=f.tb) from None
        self.unsafe_check("importing the candidate")
        if self.watch is not None:      # its multicast switches sealed, as seen from outside (rank/sealenv.py)
            from .sealenv import sealed_strings
            if sealed_strings(self.link.pid):
                self.isolation = [*self.isolation, Isolation.SEALED_ENV.value]
        # ranks may compile for different times: meet on the store (no collective: its short
        # process-group timeout would fire while a peer still compiles)
        self.files.heartbeat("import candidate (waiting for peers)")
        self.store_barrier("imported", budget, "finish importing the candidate")
        self.pin()
        if self.ref is not None:
            self.ref_scheduling = self.ref.scheduling()

    def pin(self) -> None:
        """GPU jobs: the checker on a core of its own, its two solver processes on another (cores.py)."""
        if self.job.device == "cuda" and os.environ.get("KB_DEV_NO_PIN") != "1":
            gpu = pci_address(self.torch, self.gpu)
            self.cores = solvers.pin(self.link, self.ref, self.local_rank,
                                     int(os.environ.get("LOCAL_WORLD_SIZE", self.world)), gpu)

    def reference_untouched(self, phase: str) -> None:
        """Before a reference window: the reference process is scheduled as it was set up (the
        candidate process runs as the same user, so it could renice, re-pin or re-group it to slow
        the reference; Landlock does not cover scheduling)."""
        if self.ref is None or not self.ref_scheduling:
            return
        changed = solvers.scheduling_changes(self.ref_scheduling, self.ref.scheduling(), self.ref.pid)
        if changed:
            self.die(Failure.FORBIDDEN_CALL, f"{phase}: the scheduling of the reference process was changed (only the "
                     f"candidate could): {'; '.join(changed)[:400]}", "candidate")

    def unsafe_check(self, phase: str) -> None:
        """Before every verdict: what the environment watcher saw, and that it still watches (only
        the candidate can end it: a watcher gone unseen let every later flip pass)."""
        if self.watch is None:
            return
        found = self.watch.finding()
        if found:
            self.die(Failure.UNSAFE, f"{phase}: tried to enable NVLink multicast (never allowed on this machine): its "
                     f"environment changed while it ran: {found}", "candidate")
        gone = self.watch.gone()
        if gone:
            self.die(Failure.UNSAFE, f"{phase}: the watcher of its multicast switches no longer watches ({gone}); "
                     "only the candidate process can end it", "candidate")
        if self.link is not None and self.link.pid > 0:      # and read now by the checker itself: a swap left in place at "done"
            now = self.watch.now(self.link.pid)
            if now:
                self.die(Failure.UNSAFE, f"{phase}: tried to enable NVLink multicast (never allowed on this machine): "
                         f"its environment at the end of the call: {now}", "candidate")

    # ---- inputs --------------------------------------------------------------------------------------
    def seed(self, size: str, what: str, rank: int | str | None = None) -> int:
        key = f"{self.nonce}|{self.job.problem}|{size}|{what}|{self.rank if rank is None else rank}"
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") & ((1 << 63) - 1)

    def make_inputs(self, size: str, what: str, turn: int = 0) -> Any:
        """`turn`: a trial's number (harnesslib.grid_drawn), 0 for the sets that may meet others on
        other ranks (the timed slots' copies, the anti-caching passes)."""
        gen = self._gen
        if gen is None:     # one generator, reseeded per set (a timed round makes up to 64 sets)
            gen = self._gen = self.torch.Generator(device=self.device)
        gen.manual_seed(self.seed(size, what))
        extra = {"shared_seed": self.seed(size, what, rank="all")} if self.shared_seed else {}
        try:
            with _grid_drawn(self.seed(size, "grid", rank="all"), turn):
                return self.harness.inputs(self.job.sizes[size], self.rank, self.world, gen, self.device, self.dtype,
                                           **extra)
        except Exception as e:  # a harness bug, not the candidate's
            self.die(Failure.HARNESS_ERROR, f"harness.inputs() failed for size {size}: {type(e).__name__}: {e}", "harness", e)

    def call_reference(self, args: tuple, phase: str, beat: bool = True) -> Any:
        if beat:        # a file written per call: the checks of a timed window write it once
            self.files.heartbeat(f"{phase}, reference call")
        try:
            out = self.reference.solution(*args)
            if self.job.device == "cuda":
                self.torch.cuda.synchronize()
            return out
        except Exception as e:
            text = f"{type(e).__name__}: {e}"
            # the candidate's side is the cause only where the reference lost its peers (a peer's rank
            # stopped: outcome/ blames it) or ran out of memory the candidate holds; anything else is
            # the reference's own failure, never the candidate's runtime_error
            theirs = (self.world > 1 and PEER_LOST.search(text)) or isinstance(e, MemoryError) \
                or type(e).__name__ == "OutOfMemoryError"
            self.die(Failure.RUNTIME_ERROR if theirs else Failure.HARNESS_ERROR,
                     f"the reference failed ({phase}): {text}", "reference", e)

    # ---- the end -------------------------------------------------------------------------------------
    def finish(self, sizes: list[dict], failed: dict | None = None) -> None:
        self.files.heartbeat("finish")
        warnings = self.agree(self.warnings)
        if self.rank == 0:
            self.files.result({
                "status": Outcome.FAILED if failed else Outcome.PASSED, "failure": failed, "world_size": self.world,
                "device": self.job.device, "sizes": sizes, "phases_s": self.phases, "isolation": self.isolation, "cores": self.cores,
                "warnings": [w for ws in warnings for w in ws]})
        self.barrier()
        self.files.done()

    def run(self) -> None:
        from .sizes import SizeRun
        mark("checker: start")
        self.start_candidate()
        mark("checker: solvers forked")
        self.fetch_secret()
        self.setup()
        self.import_candidate()
        mark("checker: imported")
        done: list[dict] = []
        t0 = time.perf_counter()
        try:
            for size in self.job.size_order:
                done.append(SizeRun(self, size).run())
                mark(f"checker: size {size} done")
                self.cache_back()
        except AgreedFailure as f:
            if f.record not in done:
                done.append(f.record)
            self.finish(done, failed=f.failure)
            return
        self.phases["sizes_s"] = time.perf_counter() - t0
        self.finish(done)
        mark("checker: finished")

    def cache_back(self) -> None:
        """GPU: the size's cached blocks back to the device (the allocator frees them only when its own
        process runs short: kept, they starved the solver processes of the next size)."""
        if self.job.device == "cuda":
            self.torch.cuda.empty_cache()

    def close(self) -> None:
        links = [link for link in (self.link, self.ref) if link is not None]
        for link in links:          # both told first: their CUDA teardowns overlap
            link.ask_exit()
        for link in links:
            link.close()
        mark("checker: solvers closed")
        if self.watch is not None:
            self.watch.stop()
        mark("checker: closed")


def _takes(fn: Any, name: str) -> bool:
    import inspect
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def ask_secret(address: str, rank: int, timeout: float) -> dict:
    """The job's key and nonce from the launcher's key service (launch/keyservice.py); {} if refused."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(address)
        s.sendall(json.dumps({"rank": rank}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n") and (chunk := s.recv(4096)):
            data += chunk
    return json.loads(data or b"{}")


def _grid_drawn(seed: int, turn: int) -> Any:
    """The set's exact_values grid drawn from the job's key (issue 44, class 7), where the harness uses
    harnesslib: found among the loaded modules, since the rank side imports nothing of the package's
    harness helpers (tests/test_house.py)."""
    lib = sys.modules.get("pytest_kernelbench.harnesslib")
    return lib.grid_drawn(seed, turn) if lib is not None else contextlib.nullcontext()
