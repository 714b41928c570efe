"""The rank process: forked by the rank server (worker/zygote.py) or started by torchrun
(`python -m torch.distributed.run ... -m pytest_kernelbench.worker JOB_DIR`).

For each size: trials (fresh rank-dependent inputs; the candidate first on one clone, then the
reference on another, so that no reference output exists while candidate code runs; compare),
then side-by-side timing and an anti-caching check on refilled buffers (all ranks, then only
some ranks, with new values): timed.py.
Two ways out (failures.py), each handled in one place (main): a rank that hits an error on its
own raises ItemFailed, which becomes error/rank<R>.json and exit 3 (the launcher then stops the
other ranks); verdicts
agreed across ranks (mismatch, forbidden call) raise AgreedFailure, which becomes rank 0's
result.json and exit 0. The checks themselves are plain functions in checks.py.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import sys
import time
from contextlib import contextmanager
from typing import Any, NoReturn

from ..protocol import SETUP_MARK, JobLayout, JobSpec
from . import checks, compare, timed
from .failures import AgreedFailure, ItemFailed
from .files import JobFiles, load_module

COMPILE_MARKERS = ("cpp_extension", "Error building extension", "CalledProcessError", "nvcc", "ninja", "triton.compiler",
                   "NativeLoadError")
THREAD_WAIT_S = 2.0


class Rank:
    timing_violation: str | None     # what a timed candidate round did (time_size)

    def __init__(self, job_dir: str):
        self.job = JobSpec.read(JobLayout(job_dir).job)
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        # the secret file (signing key for done/result, and the input nonce) is read before any
        # candidate code runs and deleted by rank 0 once every rank has it (see setup)
        self.secret = {}
        try:
            with open(os.path.join(job_dir, "secret")) as f:
                self.secret = json.load(f)
        except (OSError, ValueError):
            pass
        self.nonce = self.secret.get("nonce")
        self.files = JobFiles(job_dir, self.rank, self.job.token, key=self.secret.get("key"))
        self.files.redirect_output()
        self.phases: dict[str, float] = {}
        self.warnings: list[str] = []

    # ---- failure paths -------------------------------------------------------------------
    def die(self, category: str, message: str, where: str, exc: BaseException | None = None) -> NoReturn:
        """Unrecoverable on this rank: main() records why and leaves; torchrun stops the others."""
        raise ItemFailed(category, message, where, exc)

    def write_failure(self, f: ItemFailed):
        if getattr(self, "shield", None) is not None:
            self.shield.armed = False
        if getattr(self, "forbid", None) is not None:
            self.forbid.active = False
        self.files.error(f.category, f.message, f.where, f.exc)

    @contextmanager
    def armed(self, forbid: bool = True):
        """Candidate code runs: file shield armed and (unless `forbid` is off) forbidden calls counted."""
        self.forbid.active = forbid
        self.shield.armed = True
        try:
            yield
        finally:
            self.forbid.active = False
            self.shield.armed = False

    def agree(self, obj: object) -> list:
        out = [None] * self.world
        self.clocks.all_gather_object(out, obj)
        return out

    def agree_max(self, x: float) -> float:
        return max(self.agree(float(x)))

    # ---- setup -----------------------------------------------------------------------------
    def setup(self):
        t0 = time.perf_counter()
        self.files.heartbeat("init process group")
        import torch
        import torch.distributed as dist
        from . import clocks, guards, shield, tamper
        self.torch = torch
        job = self.job
        self.device_kind = job.device
        if self.device_kind == "cuda":
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
            backend = "nccl"
        else:
            torch.set_num_threads(1)
            self.device = torch.device("cpu")
            backend = "gloo"
        timeout = datetime.timedelta(seconds=float(job.pg_timeout_s))
        kwargs: dict[str, Any] = {"device_id": self.device} if backend == "nccl" else {}
        if os.environ.get("KB_RENDEZVOUS"):    # forked by the rank server: no torchrun store to join
            kwargs.update(store=rendezvous_store(os.environ["KB_RENDEZVOUS"], self.rank, self.world, timeout),
                          rank=self.rank, world_size=self.world)
        dist.init_process_group(backend, timeout=timeout, **kwargs)
        self.dtype = getattr(torch, job.dtype)
        self.files.heartbeat("load harness and reference")
        self.harness = load_module(job.harness_path, f"_kb_h_{os.urandom(6).hex()}", register=False)
        self.reference = load_module(job.reference_path, f"_kb_r_{os.urandom(6).hex()}", register=False)
        self.shared_seed = _takes(getattr(self.harness, "inputs", None), "shared_seed")
        self.clocks = clocks.ClockSet(self.device_kind)
        self.forbid = guards.ForbidGuard(job.forbid)
        self.forbid.install()
        self.multicast = None   # NVLink multicast stays off from here to the end (worker/safety.py);
        # before the tamper snapshot, which then watches its module too
        if not job.allow_multicast:
            from .safety import MulticastGuard
            self.multicast = MulticastGuard()
            self.multicast.install()
        self.tamper = tamper.TamperGuard()
        self.shield = shield.FileShield(job.protected, job_dir=self.files.dir)
        self.clocks.barrier()
        if self.rank == 0:      # every rank has read the secret: no candidate (or its children) may
            try:                # read it from disk
                os.unlink(os.path.join(self.files.dir, "secret"))
            except OSError:
                pass
        self.clocks.barrier()
        self.phases["init_s"] = time.perf_counter() - t0

    def import_candidate(self):
        t0 = time.perf_counter()
        self.files.heartbeat("import candidate")
        try:
            with self.armed(forbid=False):
                if self.job.native_lib:     # native problem: the built library behind harness.py's glue
                    from .native import NativeContext, load
                    ctx = NativeContext(self.rank, self.world, self.device, self.dtype, self.job.sizes)
                    mod = load(self.job.native_lib, self.harness, ctx)
                else:
                    mod = load_module(self.job.candidate_path, "kb_candidate", register=True)
        except BaseException as e:  # noqa: BLE001 - untrusted code may raise anything
            text = f"{type(e).__name__}: {e}"
            import traceback
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            compile_like = isinstance(e, SyntaxError) or any(m in tb for m in COMPILE_MARKERS)
            self.check_unsafe("importing the candidate", e)
            violation = self.violations()
            if violation:
                self.die("forbidden_call", f"importing the candidate: {violation} ({text})", "candidate", e)
            self.die("compile_error" if compile_like else "runtime_error", f"importing the candidate: {text}", "candidate", e)
        self.candidate = getattr(mod, "solution", None)
        if not callable(self.candidate):
            self.die("compile_error", "the candidate module defines no callable solution()", "candidate")
        self.phases["import_s"] = time.perf_counter() - t0
        self.check_unsafe("importing the candidate")
        violation = self.violations()  # import-time tampering and refused accesses count too
        if violation:
            self.die("forbidden_call", f"importing the candidate: {violation}", "candidate")
        # ranks may compile for different times: meet on the store (not a collective, whose
        # short process-group timeout would fire while a peer is still compiling)
        self.files.heartbeat("import candidate (waiting for peers)")
        self.store_barrier("imported", float(self.job.compile_timeout_s))

    def store_barrier(self, name: str, timeout_s: float, what: str = "finish importing the candidate"):
        import torch.distributed as dist
        store = dist.distributed_c10d._get_default_store()
        key = f"kb/{self.job.token}/{name}"
        store.add(key, 1)
        deadline = time.monotonic() + timeout_s
        while store.add(key, 0) < self.world:
            if time.monotonic() > deadline:
                self.die("timeout", f"peers did not {what} within {timeout_s:.0f} s", "candidate")
            time.sleep(0.02)

    # ---- calls -------------------------------------------------------------------------------
    def seed(self, size: str, what: str, rank: int | str | None = None) -> int:
        key = f"{self.nonce}|{self.job.problem}|{size}|{what}|{self.rank if rank is None else rank}"
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") & ((1 << 63) - 1)

    def make_inputs(self, size: str, what: str):
        gen = self.torch.Generator(device=self.device)
        gen.manual_seed(self.seed(size, what))
        # a harness that asks for it also gets a seed equal on every rank (data that ranks share)
        extra = {"shared_seed": self.seed(size, what, rank="all")} if self.shared_seed else {}
        try:
            return self.harness.inputs(self.job.sizes[size], self.rank, self.world, gen, self.device, self.dtype,
                                       **extra)
        except Exception as e:  # a harness bug, not the candidate's
            self.die("runtime_error", f"harness.inputs() failed for size {size}: {type(e).__name__}: {e}", "harness", e)

    def call_reference(self, args: tuple, phase: str) -> Any:
        self.files.heartbeat(f"{phase}, reference call")
        try:
            out = self.reference.solution(*args)
            self.clocks.sync(0)
            return out
        except Exception as e:
            hint = " (the candidate ran first: one that leaves collectives unmatched across ranks stalls the reference)" \
                if getattr(self, "candidate", None) is not None else ""
            self.die("runtime_error", f"the reference failed ({phase}){hint}: {type(e).__name__}: {e}", "reference", e)

    def first_call(self, args: tuple, phase: str) -> Any:
        """The first call of a size is setup: it may JIT-compile (load_inline, Triton) on one rank
        while the others wait in a barrier, allocate, rendezvous. It runs under the compile budget
        (its heartbeat carries SETUP_MARK, which the launcher discounts from the deadline) and, so
        that a peer waiting in a collective is not aborted meanwhile, under a process-group timeout
        longer than that budget (the launcher's budget then fires first and names the ranks). The
        ranks meet on the store (no collective, no short timeout) before the harness's next
        collective, then the short timeout is back: a hang after the first call surfaces fast."""
        budget_s = float(self.job.compile_timeout_s) + 30
        self.set_pg_timeout(budget_s)
        out = self.call_candidate(args, phase, watch_dispatch=False, first=True)
        self.files.heartbeat(f"{phase}, waiting for peers {SETUP_MARK}")
        self.store_barrier(f"first/{phase}", budget_s, "finish their first call of the size")
        self.set_pg_timeout(float(self.job.pg_timeout_s))
        return out

    def set_pg_timeout(self, seconds: float):
        """Timeout of the default process group's next operations (gloo and nccl alike)."""
        from torch.distributed import distributed_c10d as c10d
        try:
            c10d._set_pg_timeout(datetime.timedelta(seconds=seconds), None)
        except Exception as e:  # noqa: BLE001 - a torch without it: the short timeout stays
            note = f"rank {self.rank}: could not change the process-group timeout ({type(e).__name__}: {e})"
            if note not in self.warnings:
                self.warnings.append(note)

    def call_candidate(self, args: tuple, phase: str, watch_dispatch: bool, first: bool = False) -> Any:
        self.files.heartbeat(f"{phase}, candidate call {SETUP_MARK}" if first else f"{phase}, candidate call")
        mode = self.forbid.dispatch_mode() if watch_dispatch and self.forbid.families else None
        try:
            with self.armed():
                if mode is not None:
                    with mode:
                        out = self.candidate(*args)
                else:
                    out = self.candidate(*args)
                # the outputs (and in-place results) as they are at return, copied in stream order
                # before any synchronize: work still running on a thread or on an unjoined side
                # stream shows up as a difference
                watched = (out, args) if self.job.inplace else out
                at_return = compare.clone(watched)
                left = self.clocks.sync(THREAD_WAIT_S)
        except BaseException as e:  # noqa: BLE001
            self.check_unsafe(phase, e)
            violation = self.violations()
            if violation:
                self.die("forbidden_call", f"{phase}: {violation} ({type(e).__name__}: {e})", "candidate", e)
            self.die("runtime_error", f"{phase}: {type(e).__name__}: {e}", "candidate", e)
        self.check_unsafe(phase)
        if left:
            self.die("runtime_error", f"{phase}: solution() returned while Python threads it started were still "
                     f"running ({', '.join(left)}); all work must finish inside the call", "candidate")
        late = compare.differs(watched, at_return)
        if late:
            self.die("runtime_error", f"{phase}: {late} changed after solution() returned (work still running on "
                     "a thread or on a stream the current stream does not wait for); all work must finish "
                     "inside the call", "candidate")
        return out

    def check_unsafe(self, phase: str, exc: BaseException | None = None) -> None:
        """NVLink multicast tried or enabled (worker/safety.py) ends the item as `unsafe`, ahead of
        any other verdict (the refusal's PermissionError is no runtime_error)."""
        found = self.multicast.check() if getattr(self, "multicast", None) is not None else None
        if found:
            self.die("unsafe", f"{phase}: {found}", "candidate", exc)

    def violations(self) -> str | None:
        """Forbidden calls, tampering and reads of the problem folder seen so far (then reset)."""
        self.check_unsafe("while the candidate ran")
        found = []
        patched = self.tamper.check()
        if patched:
            found.append("patched harness functions: " + ", ".join(patched))
        if self.shield.attempts:
            found.append("refused access (hidden problem files, job control files, harness introspection): "
                         + ", ".join(sorted(set(self.shield.attempts)))[:400])
            self.shield.attempts.clear()
        if self.forbid.calls:
            calls = ", ".join(f"{k} x{v}" for k, v in sorted(self.forbid.calls.items()))
            rule = compare.forbidden_rule(self.forbid.calls)
            self.forbid.calls.clear()
            text = f"called forbidden APIs ({', '.join(self.job.forbid)}): {calls}"   # on CPU as on CUDA
            found.append(compare.tagged(text, rule) if rule else text)
        return "; ".join(found) or None

    # ---- checking ----------------------------------------------------------------------------
    def check(self, out: Any, expected: Any, cand_in: tuple, ref_in: tuple,
              pristine: tuple) -> tuple[str | None, str | None, float]:
        return checks.check_call(out, expected, cand_in, ref_in, pristine, self.job.tolerance, self.job.inplace,
                                 getattr(self.harness, "check", None))

    def run_size(self, size: str) -> dict:
        record = {"name": size, "config": self.job.sizes[size], "trials": []}
        try:
            record["cost"] = {k: float(v) for k, v in self.harness.cost(self.job.sizes[size], self.world, self.dtype).items()}
        except Exception as e:
            self.die("runtime_error", f"harness.cost() failed for size {size}: {type(e).__name__}: {e}", "harness", e)
        first_call = True
        t0 = time.perf_counter()
        expected = None
        held: list[tuple] = []
        for trial in range(int(self.job.trials)):
            phase = f"size {size}, trial {trial}"
            self.files.heartbeat(f"{phase}, inputs")
            inputs = self.make_inputs(size, f"trial{trial}")
            pristine = compare.clone(inputs)
            cand_in = compare.clone(inputs)
            # the first call of each size may set up (compile, allocate, rendezvous), so it is not
            # watched and runs under the compile budget (first_call).
            # The candidate goes first: while its code runs, no reference output of these inputs
            # exists anywhere in the process (not in a harness frame, not in freed memory).
            if first_call:
                out = self.first_call(cand_in, phase)
            else:
                out = self.call_candidate(cand_in, phase, watch_dispatch=True)
            ref_in = compare.clone(pristine)
            expected = self.call_reference(ref_in, phase)
            category, msg, err = self.check(out, expected, cand_in, ref_in, pristine)
            if category is None:
                # earlier outputs are held: one storage returned again is a reused buffer, whose
                # earlier "outputs" were overwritten (right at each check, stale for the caller)
                msg = checks.check_reuse([o for _, o in held], out, self.job.inplace)
                category = "mismatch" if msg else None
            violation = self.violations() if not first_call else self._first_call_violations()
            if violation:
                category, msg = "forbidden_call", violation
            first_call = False
            self.verdict(record, {"trial": trial, "category": category, "message": msg, "max_abs_err": err}, phase)
            # every input given to the candidate (and its output) stays alive until the size is
            # done, timing included: no later tensor can reuse its address or id, so a cache keyed
            # on those misses alike on every rank (instead of hitting on one and desyncing them)
            held.append((cand_in, out))
            del ref_in, pristine
        record["correctness_s"] = time.perf_counter() - t0
        if self.job.timing.enabled:
            self.time_size(size, record, expected)
        return record

    def _first_call_violations(self):
        """Setup calls may communicate; only tampering and file reads count on them."""
        self.forbid.calls.clear()
        return self.violations()

    def verdict(self, record: dict, mine: dict, phase: str):
        everyone = self.agree(mine)
        record["trials"].append({"trial": mine["trial"], "max_abs_err": max(v["max_abs_err"] for v in everyone),
                                 "ok": not any(v["category"] for v in everyone)})
        self.fail_if_any(everyone, phase, record)

    def fail_if_any(self, everyone: list, phase: str, record: dict):
        """Agreed per-rank verdicts -> the item's failure (the first failing rank), and the end."""
        bad = [(r, v) for r, v in enumerate(everyone) if v["category"]]
        if bad:
            r, v = bad[0]
            raise AgreedFailure({"category": v["category"], "rank": r, "phase": phase,
                                 "message": f"rank {r}, {phase}: {v['message']}"}, record)

    # ---- timing (timed.py) -------------------------------------------------------------------
    def time_size(self, size: str, record: dict, expected: Any) -> None:
        timed.time_size(self, size, record, expected)

    # ---- the end -----------------------------------------------------------------------------
    def finish(self, failed: dict | None = None, current: dict | None = None) -> None:
        self.files.heartbeat("finish")
        if current is not None and current not in self.sizes_done:
            self.sizes_done.append(current)
        warnings = self.agree(self.warnings)
        if self.rank == 0:
            self.files.result({
                "status": "failed" if failed else "passed", "failure": failed,
                "world_size": self.world, "device": self.device_kind, "sizes": self.sizes_done,
                "phases_s": self.phases, "warnings": [w for ws in warnings for w in ws],
            })
        self.clocks.barrier()
        self.files.done()

    def run(self):
        """The protocol; returns when the result is written (passed or an agreed failure)."""
        self.sizes_done = []
        self.setup()
        self.import_candidate()
        t0 = time.perf_counter()
        try:
            for size in self.job.size_order:
                self.sizes_done.append(self.run_size(size))
        except AgreedFailure as f:
            self.finish(failed=f.failure, current=f.record)
            return
        self.phases["sizes_s"] = time.perf_counter() - t0
        self.finish()


def rendezvous_store(path: str, rank: int, world: int, timeout: datetime.timedelta) -> Any:
    """Rank 0 serves a TCPStore on a port the OS picks (no race for a free port) and publishes it
    in `path`; the other ranks wait for the file and join."""
    from torch.distributed import TCPStore
    if rank == 0:
        store = TCPStore("127.0.0.1", 0, world, True, timeout=timeout, wait_for_workers=False)
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            f.write(str(store.port))
        os.replace(tmp, path)
        return store
    end = time.monotonic() + timeout.total_seconds()
    while True:
        try:
            with open(path) as f:
                port = int(f.read())
            break
        except (OSError, ValueError):
            if time.monotonic() > end:
                raise TimeoutError(f"rank 0 did not publish its store within {timeout.total_seconds():.0f} s") from None
            time.sleep(0.005)
    return TCPStore("127.0.0.1", port, world, False, timeout=timeout)


def _takes(fn: Any, name: str) -> bool:
    import inspect
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def main(argv: list[str] | None = None) -> NoReturn:
    argv = sys.argv[1:] if argv is None else argv
    from ..procs import die_with_parent
    die_with_parent()   # a rank never outlives its launcher (the zygote or torchrun)
    # stopped by torchrun or the launcher (SIGTERM): dump every thread's Python stack to fd 2 (the
    # rank's log, once redirected) before dying of the signal, so the launcher can say where a
    # rank that stopped progressing was (outcome.stopped_at)
    import faulthandler
    import signal
    faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    rank = Rank(argv[0])
    code = 0
    try:
        rank.run()
    except ItemFailed as f:
        code = 3
        rank.write_failure(f)
    except BaseException as e:  # noqa: BLE001 - anything not caught above is the harness's or a torn-down peer's
        code = 3
        rank.write_failure(ItemFailed("runtime_error", f"{type(e).__name__}: {e}", "harness", e))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # skip interpreter/NCCL teardown: candidate state must not hang the exit
