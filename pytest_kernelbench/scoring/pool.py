"""Evaluations side by side: a bounded pool of worker processes (worker.py), each with its own
Evaluator and rank server, results streamed as they finish.

Why processes, not threads over one session: a rank server's zygote serves one job at a time (its
replies are not matched to requests, and after each job it reaps every child it has), and a worker
that a harness bug kills costs that one evaluation (a retryable record), not the pool. On GPUs each
worker's KBSession leases from the machine-wide GpuPool file (launch/gpus.py), so concurrent
evaluations hold disjoint GPUs, and one that finds none free waits for a lease.
"""
from __future__ import annotations

import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from ..protocol import Failure, Outcome
from ..session import base_record
from ..spec.problem import ProblemError
from .evaluate import EvaluateError, Evaluation, UnknownProblem, find_problem, settings_for

# beyond the job's own deadline and compile budget: the worker's setup (rank server start, torch
# import on a loaded machine) before a worker that has not answered is declared lost
WORKER_MARGIN_S = 180.0


def default_workers() -> int:
    """GPUs: one worker per GPU (the leases bound how many run); CPU: half the cores, 1 to 4."""
    from ..spec import hardware
    gpus = hardware.cuda_device_count()
    return gpus if gpus else max(1, min(4, (os.cpu_count() or 2) // 2))


class WorkerLost(Exception):
    pass


class _Worker:
    """One worker process and the thread that reads its replies."""

    def __init__(self, config: dict, log_dir: Path) -> None:
        self.log = open(log_dir / f"worker-{secrets.token_hex(3)}.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "pytest_kernelbench.scoring.worker", json.dumps(config)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     start_new_session=True, bufsize=0)
        self.replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="kb-eval-worker").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.replies.put(json.loads(line))
            except ValueError:
                continue
        self.replies.put(None)

    def call(self, request: dict, timeout_s: float) -> dict:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
        except OSError as e:
            raise WorkerLost(f"the evaluation worker is gone ({e})") from None
        end = time.monotonic() + timeout_s
        while True:
            try:
                reply = self.replies.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                raise WorkerLost(f"the evaluation worker did not answer within {timeout_s:.0f} s") from None
            if reply is None:
                raise WorkerLost(f"the evaluation worker died (exit {self.proc.wait()})")
            if reply.get("id") == request["id"]:
                return reply

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, kill: bool = False) -> None:
        try:
            if kill:
                os.killpg(self.proc.pid, signal.SIGKILL)
            elif self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
        self.log.close()


class WorkerPool:
    """At most `workers` evaluations at a time; submit() returns a Future of an Evaluation."""

    def __init__(self, workers: int | None = None, problems_dir: str | Path | None = None, pkb: str | None = None,
                 workdir: str | Path | None = None, launcher: str = "fork") -> None:
        self.size = workers or default_workers()
        self.problems_dir, self.pkb = problems_dir, pkb
        self._own_workdir = workdir is None          # made here: removed by close()
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kb-pool-"))
        self.config = {"problems_dir": str(problems_dir) if problems_dir else None, "pkb": pkb,
                       "launcher": launcher}
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        for _ in range(self.size):
            self._idle.put(None)            # a slot; its worker starts on first use
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="kb-eval")
        self.running = 0
        self.queued = 0

    def check(self, problem: str, options: dict | None) -> None:
        """A request's own mistakes (unknown problem, bad option), raised before it is queued."""
        settings_for(dict(options or {}))
        try:
            find_problem(problem, self.problems_dir, self.pkb, self.workdir / ".kb-cache")
        except ProblemError:
            pass        # it exists but does not load: its record says so (invalid_problem, retryable)

    def submit(self, problem: str, code: str, options: dict | None = None, eval_id: str | None = None) -> Future:
        request = {"id": eval_id or secrets.token_hex(6), "problem": problem, "code": code,
                   "options": dict(options or {}), "submitted": time.time()}
        with self._lock:
            self.queued += 1
        return self._executor.submit(self._run, request)

    def _run(self, request: dict) -> Evaluation:
        with self._lock:
            self.queued -= 1
            self.running += 1
        worker = self._idle.get()
        try:
            if worker is None or not worker.alive():
                worker = self._start()
            try:
                reply = worker.call(request, _limit(request["options"]))
            except WorkerLost as e:
                worker.stop(kill=True)
                worker = None              # the slot starts a fresh worker next time
                return lost(request, str(e))
            if "error" in reply:
                cls = UnknownProblem if reply.get("status") == 404 else EvaluateError
                raise cls(reply["error"])
            return Evaluation.from_dict(reply["evaluation"])
        finally:
            self._idle.put(worker)
            with self._lock:
                self.running -= 1

    def _start(self) -> _Worker:
        w = _Worker({**self.config, "workdir": str(self.workdir / f"w{secrets.token_hex(3)}")}, self.workdir)
        with self._lock:
            self._all.append(w)
        return w

    def imap(self, requests: Iterable[dict | tuple]) -> Iterator[Evaluation]:
        """Every request evaluated, yielded as each finishes (not in order: Evaluation.id says which;
        a request's "id" is kept). Requests are checked first: a bad one raises before any runs."""
        reqs = [_request(r) for r in requests]
        for r in reqs:
            self.check(r["problem"], r.get("options"))
        futures = [self.submit(r["problem"], r["code"], r.get("options"), r.get("id")) for r in reqs]
        for f in as_completed(futures):
            yield f.result()

    def close(self, kill: bool = False) -> None:
        """Wait for the evaluations running (queued ones are cancelled) and stop the workers; kill:
        stop them now, each with its rank server and ranks (a service shutting down)."""
        self._executor.shutdown(wait=not kill, cancel_futures=True)
        for w in list(self._all):
            if w.alive():
                w.stop(kill=kill)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _limit(options: dict) -> float:
    timeout = options.get("deadline") or options.get("timeout") or 300.0
    return float(timeout) + 2 * float(options.get("compile_timeout") or 120.0) + WORKER_MARGIN_S


def _request(r: dict | tuple) -> dict:
    if isinstance(r, tuple):
        problem, code, *rest = r
        return {"problem": problem, "code": code, "options": rest[0] if rest else {}}
    return dict(r)


def lost(request: dict, why: str) -> Evaluation:
    """The record of an evaluation whose worker was lost: the infrastructure's, retryable."""
    rec = base_record(None, None, f"evaluate/{request['id']}::test_problem[{request['problem']}]")
    rec.end(Outcome.ERROR, Failure.HARNESS_ERROR, why)
    return Evaluation(request["id"], request["problem"], rec, f"Not run: {why}")


def evaluate_many(requests: Iterable[dict | tuple], workers: int | None = None, **common: Any) -> Iterator[Evaluation]:
    """A batch: each request {"problem", "code", "options"?, "id"?} (or a (problem, code[, options])
    tuple) evaluated on a pool of `workers` processes, yielded as each finishes. `common` options
    apply to every request (a request's own win); problems_dir / pkb say where problems come from."""
    where = {k: common.pop(k) for k in ("problems_dir", "pkb") if k in common}
    reqs = []
    for r in requests:
        r = _request(r)
        r["options"] = {**common, **(r.get("options") or {})}
        reqs.append(r)
    with WorkerPool(workers, **where) as pool:
        yield from pool.imap(reqs)
