"""The rank process: `python -m torch.distributed.run ... -m pytest_kernelbench.worker JOB_DIR`.

For each size: trials (fresh rank-dependent inputs; reference first on its own clone; candidate
on another; compare), then side-by-side timing and an anti-caching check on refilled buffers.
A rank that hits an error in candidate code writes error/rank<R>.json and exits at once, so
torchrun tears the job down; verdicts (mismatch, forbidden call) are agreed across ranks and
written by rank 0 to result.json, with exit 0.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import sys
import time

from .files import JobFiles, load_module

COMPILE_MARKERS = ("cpp_extension", "Error building extension", "CalledProcessError", "nvcc", "ninja", "triton.compiler")
THREAD_WAIT_S = 2.0


class Rank:
    def __init__(self, job_dir: str):
        with open(os.path.join(job_dir, "job.json")) as f:
            self.job = json.load(f)
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self.files = JobFiles(job_dir, self.rank, self.job["token"])
        self.files.redirect_output()
        self.phases = {}
        self.warnings = []

    # ---- failure paths -------------------------------------------------------------------
    def die(self, category: str, message: str, where: str, exc=None):
        """Unrecoverable on this rank: record why and leave now; torchrun stops the others."""
        try:
            self.files.error(category, message, where, exc)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(3)

    def agree(self, obj) -> list:
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
        from . import guards
        self.torch = torch
        job = self.job
        self.device_kind = job["device"]
        if self.device_kind == "cuda":
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
            backend = "nccl"
        else:
            torch.set_num_threads(1)
            self.device = torch.device("cpu")
            backend = "gloo"
        timeout = datetime.timedelta(seconds=float(job.get("pg_timeout_s", 30)))
        kwargs = {"device_id": self.device} if backend == "nccl" else {}
        dist.init_process_group(backend, timeout=timeout, **kwargs)
        self.dtype = getattr(torch, job["dtype"])
        self.files.heartbeat("load harness and reference")
        self.harness = load_module(job["harness_path"], f"_kb_h_{os.urandom(6).hex()}", register=False)
        self.reference = load_module(job["reference_path"], f"_kb_r_{os.urandom(6).hex()}", register=False)
        self.clocks = guards.ClockSet(self.device_kind)
        self.forbid = guards.ForbidGuard(job.get("forbid", []))
        self.forbid.install()
        self.tamper = guards.TamperGuard()
        self.shield = guards.FileShield(job.get("protected", []))
        self.clocks.barrier()
        self.phases["init_s"] = time.perf_counter() - t0

    def import_candidate(self):
        t0 = time.perf_counter()
        self.files.heartbeat("import candidate")
        self.shield.armed = True
        try:
            mod = load_module(self.job["candidate_path"], "kb_candidate", register=True)
        except BaseException as e:  # noqa: BLE001 - untrusted code may raise anything
            text = f"{type(e).__name__}: {e}"
            import traceback
            tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            compile_like = isinstance(e, SyntaxError) or any(m in tb for m in COMPILE_MARKERS)
            self.die("compile_error" if compile_like else "runtime_error", f"importing the candidate: {text}", "candidate", e)
        finally:
            self.shield.armed = False
        self.candidate = getattr(mod, "solution", None)
        if not callable(self.candidate):
            self.die("compile_error", "the candidate module defines no callable solution()", "candidate")
        self.phases["import_s"] = time.perf_counter() - t0
        self.violations()  # import-time tampering counts too

    # ---- calls -------------------------------------------------------------------------------
    def seed(self, size: str, what: str) -> int:
        key = f"{self.job['nonce']}|{self.job['problem']}|{size}|{what}|{self.rank}"
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") & ((1 << 63) - 1)

    def make_inputs(self, size: str, what: str):
        gen = self.torch.Generator(device=self.device)
        gen.manual_seed(self.seed(size, what))
        try:
            return self.harness.inputs(self.job["sizes"][size], self.rank, self.world, gen, self.device, self.dtype)
        except Exception as e:  # a harness bug, not the candidate's
            self.die("runtime_error", f"harness.inputs() failed for size {size}: {type(e).__name__}: {e}", "harness", e)

    def call_reference(self, args, phase):
        self.files.heartbeat(f"{phase}, reference call")
        try:
            out = self.reference.solution(*args)
            self.clocks.sync(0)
            return out
        except Exception as e:
            self.die("runtime_error", f"the reference failed ({phase}): {type(e).__name__}: {e}", "reference", e)

    def call_candidate(self, args, phase, watch_dispatch: bool):
        self.files.heartbeat(f"{phase}, candidate call")
        self.forbid.active = True
        self.shield.armed = True
        mode = self.forbid.dispatch_mode() if watch_dispatch and self.forbid.families else None
        try:
            if mode is not None:
                with mode:
                    out = self.candidate(*args)
            else:
                out = self.candidate(*args)
            left = self.clocks.sync(THREAD_WAIT_S)
        except BaseException as e:  # noqa: BLE001
            self.die("runtime_error", f"{phase}: {type(e).__name__}: {e}", "candidate", e)
        finally:
            self.forbid.active = False
            self.shield.armed = False
        if left:
            self.die("runtime_error", f"{phase}: solution() returned while Python threads it started were still "
                     f"running ({', '.join(left)}); all work must finish inside the call", "candidate")
        return out

    def violations(self) -> str | None:
        """Forbidden calls, tampering and reads of the problem folder seen so far (then reset)."""
        found = []
        patched = self.tamper.check()
        if patched:
            found.append("patched harness functions: " + ", ".join(patched))
        if self.shield.attempts:
            found.append("tried to read the problem folder: " + ", ".join(sorted(set(self.shield.attempts)))[:300])
            self.shield.attempts.clear()
        if self.forbid.calls:
            calls = ", ".join(f"{k} x{v}" for k, v in sorted(self.forbid.calls.items()))
            self.forbid.calls.clear()
            if self.job.get("enforce_forbid", True):
                found.append(f"called forbidden APIs ({', '.join(self.job['forbid'])}): {calls}")
            else:
                self.warnings.append(f"rank {self.rank}: called forbidden APIs (not enforced on {self.device_kind}): {calls}")
        return "; ".join(found) or None

    # ---- checking ----------------------------------------------------------------------------
    def check(self, out, expected, cand_in, ref_in, pristine) -> tuple[str | None, str | None, float]:
        """(category, message, max error) of one candidate call against the reference."""
        from . import compare
        msg = compare.structure(out, expected)
        err = 0.0
        if msg is None and hasattr(self.harness, "check"):
            try:
                self.harness.check(out, expected, cand_in, dict(self.job["tolerance"]))
            except AssertionError as e:
                msg = f"{e}"
        elif msg is None:
            msg, err = compare.values(out, expected, self.job["tolerance"])
        if msg is None and self.job.get("inplace"):
            msg, _ = compare.values(cand_in, ref_in, self.job["tolerance"], "input")
            msg = msg and f"in-place result wrong: {msg}"
        elif msg is None:
            msg = compare.unchanged(cand_in, pristine) or compare.aliasing(out, cand_in)
        return ("mismatch" if msg else None), msg, err

    def run_size(self, size: str) -> dict:
        from . import compare
        record = {"name": size, "config": self.job["sizes"][size], "trials": []}
        try:
            record["cost"] = {k: float(v) for k, v in self.harness.cost(self.job["sizes"][size], self.world, self.dtype).items()}
        except Exception as e:
            self.die("runtime_error", f"harness.cost() failed for size {size}: {type(e).__name__}: {e}", "harness", e)
        first_call = True
        t0 = time.perf_counter()
        expected = None
        for trial in range(int(self.job.get("trials", 2))):
            phase = f"size {size}, trial {trial}"
            self.files.heartbeat(f"{phase}, inputs")
            inputs = self.make_inputs(size, f"trial{trial}")
            pristine = compare.clone(inputs)
            ref_in = compare.clone(inputs)
            expected = self.call_reference(ref_in, phase)
            cand_in = compare.clone(inputs)
            # the first call of each size may set up (allocate, rendezvous), so it is not watched
            out = self.call_candidate(cand_in, phase, watch_dispatch=not first_call)
            category, msg, err = self.check(out, expected, cand_in, ref_in, pristine)
            violation = self.violations() if not first_call else self._first_call_violations()
            if violation:
                category, msg = "forbidden_call", violation
            first_call = False
            self.verdict(record, {"trial": trial, "category": category, "message": msg, "max_abs_err": err}, phase)
            del out, cand_in, ref_in, pristine
        record["correctness_s"] = time.perf_counter() - t0
        if self.job["timing"].get("enabled", True):
            self.time_size(size, record, expected)
        return record

    def _first_call_violations(self):
        """Setup calls may communicate; only tampering and file reads count on them."""
        self.forbid.calls.clear()
        return self.violations()

    def verdict(self, record: dict, mine: dict, phase: str):
        everyone = self.agree(mine)
        bad = [(r, v) for r, v in enumerate(everyone) if v["category"]]
        record["trials"].append({"trial": mine["trial"], "max_abs_err": max(v["max_abs_err"] for v in everyone),
                                 "ok": not bad})
        if bad:
            r, v = bad[0]
            self.finish(failed={"category": v["category"], "rank": r, "phase": phase,
                                "message": f"rank {r}, {phase}: {v['message']}"}, current=record)

    # ---- timing ------------------------------------------------------------------------------
    def time_size(self, size: str, record: dict, expected):
        from . import compare
        from .timing import Timing, summarize
        t0 = time.perf_counter()
        torch = self.torch
        probe = self.make_inputs(size, "time0")
        set_bytes = sum(v.numel() * v.element_size() for _, v in compare.leaves((probe, expected))
                        if isinstance(v, torch.Tensor))
        tcfg = self.job["timing"]
        l2 = int(tcfg.get("l2_bytes") or 0)
        if not l2 and self.device_kind == "cuda":
            l2 = int(getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 0) or 0)
        n_sets = max(2, math.ceil(3 * l2 / max(set_bytes, 1))) if l2 else 2
        n_sets = int(min(n_sets, tcfg.get("max_sets", 64), max(2, tcfg.get("set_budget_bytes", 8 << 30) // max(set_bytes, 1))))
        sets = [probe] + [self.make_inputs(size, f"time{k}") for k in range(1, n_sets)]

        def refill(round_no):
            for k, s in enumerate(sets):
                compare.refill(s, self.make_inputs(size, f"round{round_no}set{k}"))

        def candidate_guard(active: bool):
            self.forbid.active = active
            if not active:
                v = self.violations()
                if v:
                    self.timing_violation = v

        self.timing_violation = None

        def ref(*a):
            return self.reference.solution(*a)

        def cand(*a):
            return self.candidate(*a)

        timer = Timing(self.clocks, self.agree_max, self.files.heartbeat, tcfg)
        try:
            measured = timer.run(f"size {size}", ref, cand, sets, refill, candidate_guard)
        except BaseException as e:  # noqa: BLE001 - candidate code ran inside
            self.die("runtime_error", f"size {size}, timing: {type(e).__name__}: {e}", "candidate", e)
        mine = {"category": None, "message": None}
        if measured["leftover_threads"]:
            mine = {"category": "runtime_error", "message": f"threads still running after a timed round: {measured['leftover_threads']}"}
        elif self.timing_violation:
            mine = {"category": "forbidden_call", "message": f"during timing: {self.timing_violation}"}
        else:
            mine = self.after_timing_check(size, sets, refill)
        everyone = self.agree({"times": measured["times"], **mine})
        bad = [(r, v) for r, v in enumerate(everyone) if v["category"]]
        if bad:
            r, v = bad[0]
            phase = f"size {size}, check after timing"
            self.finish(failed={"category": v["category"], "rank": r, "phase": phase,
                                "message": f"rank {r}, {phase}: {v['message']}"}, current=record)
        timing = {name: summarize([v["times"][name] for v in everyone]) for name in ("reference", "candidate")}
        for name in timing:
            timing[name]["iters"] = measured["iters"][name]
        record["timing"] = {**timing, "sets": n_sets, "set_bytes": set_bytes}
        record["speedup"] = timing["reference"]["median_s"] / max(timing["candidate"]["median_s"], 1e-12)
        record["timing_s"] = time.perf_counter() - t0

    def after_timing_check(self, size, sets, refill) -> dict:
        """Refill the timing buffers (same pointers, new values) and check every output: a cache
        keyed on pointer, id, shape or a few elements now returns stale data."""
        from . import compare
        refill("after")
        phase = f"size {size}, check after timing"
        outs, exps, ref_ins = [], [], []
        for s in sets:
            ref_in = compare.clone(s)
            exps.append(self.call_reference(ref_in, phase))
            ref_ins.append(ref_in)
        pristine = [compare.clone(s) for s in sets] if not self.job.get("inplace") else [None] * len(sets)
        for s in sets:
            outs.append(self.call_candidate(s, phase, watch_dispatch=True))
        for k, (out, exp, s, ref_in, pr) in enumerate(zip(outs, exps, sets, ref_ins, pristine)):
            category, msg, _ = self.check(out, exp, s, ref_in, pr)
            if category:
                return {"category": category, "message": f"input set {k}: {msg}"}
        msg = None if self.job.get("inplace") else compare.distinct(outs)
        if msg:
            return {"category": "mismatch", "message": msg}
        v = self.violations()
        return {"category": "forbidden_call", "message": v} if v else {"category": None, "message": None}

    # ---- the end -----------------------------------------------------------------------------
    def finish(self, failed=None, current=None):
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
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)  # skip interpreter/NCCL teardown: candidate state must not hang the exit

    def run(self):
        self.sizes_done = []
        self.setup()
        self.import_candidate()
        t0 = time.perf_counter()
        for size in self.job["size_order"]:
            self.sizes_done.append(self.run_size(size))
        self.phases["sizes_s"] = time.perf_counter() - t0
        self.finish()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    from ..launch import die_with_parent
    die_with_parent()   # a rank never outlives its torchrun
    rank = Rank(argv[0])
    try:
        rank.run()
    except BaseException as e:  # noqa: BLE001 - anything not caught above is the harness's or a torn-down peer's
        rank.die("runtime_error", f"{type(e).__name__}: {e}", "harness", e)
