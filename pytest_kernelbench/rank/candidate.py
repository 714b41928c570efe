"""The candidate process: forked by its checker before the checker holds anything secret, hardened
(sandbox.py) before any candidate code is imported, then it serves the checker's requests over
the channel: join the candidate group, import the candidate, map input arenas, run batches of
solution() calls and describe their outputs. It holds no secret, no harness, no reference and no
verdict, and nothing it says is trusted: the checker reads outputs and inputs itself.

The in-process guards (forbidden API counters, the multicast audit hook, the file shield, the
global torch state rule) are best effort here and report through the batch's Done.
"""
from __future__ import annotations

import bisect
import datetime
import gc
import importlib.util
import os
import sys
import threading
import time
import traceback
from typing import Any

from ..protocol import (
    Arena,
    Batch,
    CandidateInit,
    Done,
    Exit,
    Failed,
    Failure,
    Imported,
    Release,
    Sets,
    StorePort,
    encode,
)
from ..procs import mark
from . import memory, outputs
from .channel import Channel, ControlPage

COMPILE_MARKERS = ("cpp_extension", "Error building extension", "CalledProcessError", "nvcc", "ninja",
                   "triton.compiler", "NativeLoadError")
THREAD_WAIT_S = 2.0
SPIN_LIMIT_S = 600.0


class CandidateProcess:
    def __init__(self, chan: Channel, ctrl: ControlPage, layers: list[str], role: str = "candidate"):
        self.chan, self.ctrl, self.layers = chan, ctrl, layers
        # "reference": the same process, serving the reference for timing, so both sides of a timed
        # window run the same code in the same kind of process (its findings are not a verdict)
        self.role = role
        self.arenas: dict[int, Any] = {}
        self.sets: list[Any] = []
        self.trees: list[dict] = []
        self.held: list[Any] = []
        self.exported: list[tuple[int, int]] = []      # CUDA allocations already announced: (base, end)
        self.driver: Any = None
        self.sync: Any = None
        self.probe: Any = None          # CUDA: how long the GPU takes to run a kernel before a window (foreign.py)
        self.pid = os.getpid()
        self.served = 0                 # messages served (the control page says so: Link.wait_served)

    # ---- setup ------------------------------------------------------------------------------------
    def init(self, msg: CandidateInit) -> None:
        import torch
        import torch.distributed as dist
        from torch.distributed import TCPStore
        self.msg, self.torch = msg, torch
        self.cuda = msg.device == "cuda"
        if self.cuda:
            torch.cuda.set_device(msg.local_rank)
            self.device = torch.device("cuda", msg.local_rank)
            torch.zeros(1, device=self.device)       # the context, before the driver calls
            from .cuda import Driver
            self.driver = Driver()
            self.sync = torch.cuda.synchronize
            from .foreign import Probe
            self.probe = Probe(torch, self.device)
        else:
            torch.set_num_threads(1)
            self.device = torch.device("cpu")
            self.sync = None
        # the group's timeout is fixed when it is made (gloo's point-to-point calls ignore later
        # changes): long enough for the first call's setup; the launcher's deadline bounds hangs
        timeout = datetime.timedelta(seconds=float(msg.setup_timeout_s))
        if msg.rank == 0:
            store = TCPStore("127.0.0.1", 0, msg.world, True, timeout=timeout, wait_for_workers=False)
            self.chan.send(StorePort(store.port))
        else:
            store = TCPStore(msg.store_host, msg.store_port, msg.world, False, timeout=timeout)
        # gloo where ranks share a GPU (JobSpec.backend): NCCL refuses two ranks on one device
        backend = msg.backend or ("nccl" if self.cuda else "gloo")
        kwargs: dict[str, Any] = {"device_id": self.device} if backend == "nccl" else {}
        dist.init_process_group(backend, store=store, rank=msg.rank, world_size=msg.world,
                                timeout=timeout, **kwargs)
        from . import p2pstage
        p2pstage.serve(backend, self.cuda)     # before the forbid guard, which wraps what it finds
        self.dtype = getattr(torch, msg.dtype)
        from .globalstate import GlobalState
        from .guards import ForbidGuard
        from .shield import FileShield
        self.forbid = ForbidGuard(msg.forbid)
        self.forbid.install()
        self.multicast = None
        if not msg.allow_multicast and os.environ.get("KB_DEV_NO_GUARDS") != "1":
            from .multicast import MulticastGuard
            self.multicast = MulticastGuard()
            self.multicast.install()
            if self.role == "candidate" and os.environ.get("KB_DEV_NO_SEAL") != "1":
                self.seal_env()
        self.shield = FileShield(msg.protected if os.environ.get("KB_DEV_NO_GUARDS") != "1" else [],
                                 job_dir=(msg.job_dir or None) if os.environ.get("KB_DEV_NO_GUARDS") != "1" else None)
        self.state = GlobalState()
        self.baseline_threads = set(threading.enumerate())
        self.baseline_count = len(self.baseline_threads)

    def seal_env(self) -> None:
        """The multicast switches read-only and sealed before any candidate code runs (rank/sealenv.py;
        the checker looks from outside whether they are); where the kernel refuses, the log says so."""
        from .sealenv import Seal
        self.seal = Seal()         # alive as long as the process: libc points into it
        try:
            said = self.seal.seal()
        except Exception as e:  # noqa: BLE001 - the watcher's sampling still stands
            said = f"the guarded environment strings could not be sealed ({type(e).__name__}: {e})"
        assert self.multicast is not None
        self.multicast.before_env_change = self.seal.writable
        if not self.seal.sealed:
            print(f"kernelbench: {said}", file=sys.stderr, flush=True)

    def import_candidate(self) -> None:
        msg = self.msg
        t0 = time.perf_counter()
        self.shield.armed = self.role == "candidate"     # the reference lives in the problem tree
        try:
            if msg.native_lib:
                from .native import NativeContext, load
                glue = _load_file(msg.glue_path, "kb_glue")
                ctx = NativeContext(msg.rank, msg.world, self.device, self.dtype, msg.sizes)
                module: Any = load(msg.native_lib, glue, ctx)
            else:
                module = _load_file(msg.candidate_path, f"kb_{self.role}")
        except BaseException as e:  # noqa: BLE001 - untrusted code may raise anything
            self.shield.armed = False
            tb = traceback.format_exc()
            unsafe = self.unsafe()
            if unsafe:
                raise _Stop(Failure.UNSAFE, f"importing the candidate: {unsafe}", tb) from None
            compile_like = isinstance(e, SyntaxError) or any(m in tb for m in COMPILE_MARKERS)
            raise _Stop(Failure.COMPILE_ERROR if compile_like else Failure.RUNTIME_ERROR,
                        f"importing the candidate: {type(e).__name__}: {e}", tb) from None
        self.shield.armed = False
        self.solution: Any = getattr(module, "solution", None)
        if not callable(self.solution):
            raise _Stop(Failure.COMPILE_ERROR, f"the {self.role} module defines no callable solution()")
        self.modules: dict[str, Any] = {"": self.solution}     # Batch.module: the reference process's baselines too
        if self.role != "candidate":       # the reference is trusted: nothing below is its verdict
            for name, path in msg.baselines.items():
                try:
                    self.modules[name] = _load_file(path, f"kb_baseline_{name}").solution
                except BaseException as e:  # noqa: BLE001 - the harness's fault (the checker says so)
                    raise _Stop(Failure.RUNTIME_ERROR, f"importing the baseline {name}: {type(e).__name__}: {e}",
                                traceback.format_exc()) from None
            self.chan.send(Imported(time.perf_counter() - t0))
            return
        unsafe = self.unsafe()
        if unsafe:
            raise _Stop(Failure.UNSAFE, f"importing the candidate: {unsafe}")
        changed = self.state.check()
        if changed:
            raise _Stop(Failure.FORBIDDEN_CALL, f"importing the candidate changed the {_rule()}: {'; '.join(changed)}")
        if self.shield.attempts:
            raise _Stop(Failure.FORBIDDEN_CALL, "importing the candidate: refused access to hidden files: "
                        + ", ".join(sorted(set(self.shield.attempts)))[:400])
        self.chan.send(Imported(time.perf_counter() - t0))

    # ---- requests ---------------------------------------------------------------------------------
    def map_arena(self, msg: Arena, fds: list[int]) -> None:
        self.arenas[msg.id] = memory.Mapped(msg, fds, self.device, self.driver)

    def set_inputs(self, msg: Sets) -> None:
        self.trees = list(msg.sets)
        self.sets = [memory.build(t, self.arenas) for t in msg.sets]

    def run_batch(self, msg: Batch, seq: int) -> None:
        """Wait for "go", call solution() on each listed set, hold every output, synchronize the
        device, describe the outputs, and only then mark "done". The guards are armed from the
        batch's receipt (serve() arms them before this runs; again here for direct callers)."""
        self.forbid.active = not msg.first
        self.shield.armed = True
        if msg.inputs:        # what an earlier call rebound in a set (an in-place problem) is undone
            for i in set(msg.calls):
                self.sets[i] = memory.build(self.trees[i], self.arenas)
        # no garbage collection inside a window, on both sides (as timeit does): a collection is a
        # pause of milliseconds that lands in one window and not the other
        collect = not msg.first and gc.isenabled() and os.environ.get("KB_DEV_GC_ON") != "1"
        if collect:
            gc.disable()
        probe_s = self._probe()
        if msg.spin:
            self.ctrl.mark_armed(seq)
            self.ctrl.spin(0, seq, time.monotonic() + SPIN_LIMIT_S)
        else:
            self.chan.wait_poke()
        t_go = time.perf_counter()
        done = Done(outputs=[], probe_s=probe_s)
        new: list[list] = []
        outs: list[Any] = []
        self.held.append(outs)          # alive until Release: no later call can reuse their memory
        running: list[str] = []
        try:
            solve = self.modules[msg.module]
            for i in msg.calls:
                outs.append(solve(*self.sets[i]))
                if threading.active_count() > self.baseline_count and not running:   # cheap: no list made
                    running = [t.name for t in threading.enumerate() if t not in self.baseline_threads]
            t_calls = time.perf_counter()
            if self.sync is not None:
                self.sync()
            t_sync = time.perf_counter()
            done.outputs, done.layouts = outputs.describe_calls(outs, lambda p: self._export(p, new))
            if msg.inputs:
                done.inputs = [outputs.describe(self.sets[i], lambda p: self._export(p, new)) for i in msg.calls]
        except BaseException as e:  # noqa: BLE001
            t_calls = t_sync = time.perf_counter()
            done.failed = {"category": Failure.RUNTIME_ERROR, "message": f"{type(e).__name__}: {e}",
                           "traceback": traceback.format_exc()[-4000:]}
        finally:
            if os.getpid() != self.pid:     # a child the candidate forked, unwinding into the runtime
                os._exit(0)
            self.forbid.active = False
            self.shield.armed = False
        done.segments = new
        done.lent = [[m.ptr, m.nbytes, m.id] for m in self.arenas.values() if getattr(m, "ptr", 0)]
        done.threads = running or self._threads()
        done.unsafe = self.unsafe()
        done.forbidden = self.forbid.collect(counted=not msg.first)
        done.state = self.state.check()
        if self.shield.attempts:
            done.forbidden["refused access to hidden files: " + ", ".join(sorted(set(self.shield.attempts)))[:300]] = 1
            self.shield.attempts.clear()
        done.stamps = [t_go, t_calls, t_sync, time.perf_counter()]
        self.ctrl.put_done(seq, encode(done))
        self.chan.poke()
        if collect:
            gc.enable()

    def _probe(self) -> float | None:
        """Before "armed", outside the timed part: is other work holding the GPU?"""
        if self.probe is None:
            return None
        try:
            return self.probe()
        except Exception:  # noqa: BLE001 - a candidate may have changed the device or stream under it
            return None

    def _export(self, p: int, new: list[list]) -> None:
        """Announce the CUDA allocation holding device address p, the first time an output lives
        there (cuMemGetAddressRange + IPC handle), so the checker can open it once."""
        i = bisect.bisect_right(self.exported, (p, float("inf"))) - 1   # in the window: O(log n), not a scan
        if i >= 0 and self.exported[i][0] <= p < self.exported[i][1]:
            return
        assert self.driver is not None
        from .cuda import CudaError
        try:
            base, size = self.driver.allocation(p)
            handle = self.driver.ipc_handle(base).hex()
        except CudaError:       # memory it was lent, or not a plain allocation: the checker cannot read it
            return
        bisect.insort(self.exported, (base, base + size))
        new.append([base, size, handle])

    def _threads(self) -> list[str]:
        """Python threads the candidate started that are still running (after a short wait)."""
        end = time.monotonic() + THREAD_WAIT_S
        while True:
            extra = [t for t in threading.enumerate() if t not in self.baseline_threads and t.is_alive()]
            if not extra or time.monotonic() > end:
                return [t.name for t in extra]
            for t in extra:
                t.join(0.05)

    def unsafe(self) -> str | None:
        return self.multicast.check() if self.multicast is not None else None

    def release(self) -> None:
        self.held.clear()

    def serve(self) -> None:
        seq = 0
        while True:
            msg, fds = self.chan.recv()
            if isinstance(msg, Arena):
                self.map_arena(msg, fds)
            elif isinstance(msg, Sets):
                self.set_inputs(msg)
            elif isinstance(msg, Batch):
                seq += 1
                # armed here, inline, before any code of the batch (run_batch itself may have been
                # replaced by the candidate): what it does for a batch before "go" is counted too
                self.forbid.active = not msg.first
                self.shield.armed = True
                self.run_batch(msg, seq)
            elif isinstance(msg, Release):
                self.release()
            elif isinstance(msg, Exit):
                mark(f"{self.role}: exit asked")
                return
            self.served += 1
            self.ctrl.mark_served(self.served)


class _Stop(Exception):
    def __init__(self, category: str, message: str, tb: str = ""):
        super().__init__(message)
        self.failed = Failed(category, message, tb[-4000:])


def _rule() -> str:
    from .globalstate import RULE
    return RULE


def _load_file(path: str | None, name: str) -> Any:
    if not path:
        raise ImportError("no file to load")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
