"""The scoring service (`kernelbench serve`): a versioned JSON API over a WorkerPool, on FastAPI +
uvicorn (the ASGI stack of the ML-serving ecosystem; the optional extra 'serve', imported only
here). The API process never runs candidate code: evaluations run in the pool's worker processes,
each candidate in the harness's own hardened processes, so a candidate that kills itself, forks,
deadlocks or floods output costs its own evaluation (a verdict, or a retryable record when a worker
is lost), never the service.

    GET  /v1/health                      queue depth, workers, GPU leases
    GET  /v1/problems                    every problem (id, title, world sizes, devices)
    GET  /v1/problems/{id}/prompt        the task a model sees (as `kernelbench prompt`)
    POST /v1/evaluate                    {"problem", "code", "options"?, "wait"?: seconds}
                                         -> 200 the evaluation (finished within wait), else 202 {"id"}
    GET  /v1/evaluations/{id}            {"id", "status": queued|done, "evaluation"?}
    POST /v1/batches                     {"requests": [{"problem", "code", "options"?, "id"?}], "options"?}
                                         -> 202 {"batch", "ids"}
    GET  /v1/batches/{id}                every evaluation's status (and result once done)
    GET  /v1/batches/{id}/stream         NDJSON: one evaluation per line, as each finishes

Bound to 127.0.0.1 by default; any other address needs a bearer token (it runs untrusted code on
this machine's GPUs), which every request must then carry. Requests that are malformed (422), too
large (413), for an unknown problem (404) or that find the queue full (429) get a 4xx and run nothing.
"""
# no `from __future__ import annotations`: FastAPI reads the endpoints' annotations at run time,
# and the request models are local to make_app (pydantic is imported only when serving)
import asyncio
import contextlib
import hmac
import ipaddress
import json
import secrets
import time
from collections import OrderedDict
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

from ..spec.problem import ProblemError
from .evaluate import EvaluateError, UnknownProblem, list_problems
from .pool import WorkerPool

API = "v1"
MAX_BODY_BYTES = 4 * 1024 * 1024       # a batch of 32 candidates of 100 KiB each fits
MAX_CODE_CHARS = 256 * 1024
MAX_BATCH = 256
MAX_TIMEOUT_S = 3600.0                 # the longest job deadline (timeout, deadline) a request may ask for
KEEP_FINISHED = 10_000                 # finished evaluations kept for polling (oldest dropped first)
STATUSES = ("queued", "done", "refused")     # an evaluation's status in the API
QUEUED, DONE, REFUSED = STATUSES


class ServeError(Exception):
    """The service cannot start as asked (str(): the one line shown)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    if not is_loopback(host) and not token:
        raise ServeError(f"--host {host}: a non-local address needs a bearer token (--token or $KB_SERVE_TOKEN): "
                         "the service runs untrusted code on this machine")


def gpu_leases() -> dict:
    """The GPUs of this machine and the leases held on them now (launch/gpus.py's state file)."""
    import os
    import re

    from ..launch.gpus import GpuPool
    from ..spec import hardware
    count = hardware.cuda_device_count()
    if not count:
        return {"count": 0, "held": {}}
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pytest-kernelbench"
    visible = re.sub(r"[^A-Za-z0-9,-]", "", os.environ.get("CUDA_VISIBLE_DEVICES", "all")) or "all"
    state = GpuPool(cache / f"gpu-leases-{visible}.json", list(range(count)))._load()
    return {"count": count, "held": {g: lease.get("item") for g, lease in state["held"].items()}}


class Jobs:
    """Evaluations by id: the pool's futures while they run, their results after (bounded). Used
    from the event loop only (every endpoint that touches it is async), so never from two threads."""

    def __init__(self, pool: WorkerPool, limit: int) -> None:
        self.pool, self.limit = pool, limit
        self.futures: dict[str, Future] = {}
        self.batches: dict[str, list[str]] = {}
        self.done: OrderedDict[str, dict] = OrderedDict()

    def pending(self) -> int:
        return sum(1 for f in self.futures.values() if not f.done())

    def room(self, n: int) -> bool:
        return self.pending() + n <= self.limit

    def submit(self, req: dict) -> str:
        eval_id = req.get("id") or secrets.token_hex(8)
        if eval_id in self.futures or eval_id in self.done:
            eval_id = f"{eval_id}-{secrets.token_hex(3)}"
        self.futures[eval_id] = self.pool.submit(req["problem"], req["code"], req.get("options") or {}, eval_id)
        return eval_id

    def status(self, eval_id: str) -> dict | None:
        if eval_id in self.done:
            return self.done[eval_id]
        fut = self.futures.get(eval_id)
        if fut is None:
            return None
        if not fut.done():
            return {"id": eval_id, "status": QUEUED}
        return self._finish(eval_id, fut)

    def _finish(self, eval_id: str, fut: Future) -> dict:
        try:
            out = {"id": eval_id, "status": DONE, "evaluation": fut.result().to_dict()}
        except EvaluateError as e:     # checked at submission; a worker may still refuse
            out = {"id": eval_id, "status": REFUSED, "error": str(e)}
        self.futures.pop(eval_id, None)
        self.done[eval_id] = out
        while len(self.done) > KEEP_FINISHED:
            self.done.popitem(last=False)
        return out

    async def wait(self, eval_id: str, timeout: float | None) -> dict:
        fut = self.futures.get(eval_id)
        if fut is not None:
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), timeout)
            except asyncio.TimeoutError:
                pass
            except Exception:  # noqa: BLE001 - the status says what happened
                pass
        return self.status(eval_id) or {"id": eval_id, "status": "unknown"}


def make_app(pool: WorkerPool, token: str | None = None, queue_limit: int = 256) -> Any:
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.responses import JSONResponse, StreamingResponse
    from pydantic import BaseModel, ConfigDict, Field

    from .. import __version__

    class EvalRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        problem: str = Field(min_length=1, max_length=200)
        code: str = Field(max_length=MAX_CODE_CHARS)
        options: dict[str, Any] = Field(default_factory=dict)
        id: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
        wait: float | None = Field(default=None, ge=0, le=3600)     # seconds to wait for the result

    class BatchRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        requests: list[EvalRequest] = Field(min_length=1, max_length=MAX_BATCH)
        options: dict[str, Any] = Field(default_factory=dict)      # for every request (a request's own win)

    jobs = Jobs(pool, pool.size + queue_limit)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> Any:
        yield
        # here, not after uvicorn.run returns: uvicorn re-raises the SIGTERM it caught once it has
        # shut down, which would leave the workers (their own sessions) running on their own
        pool.close(kill=True)

    app = FastAPI(title="pytest-kernelbench scoring service", version=__version__, lifespan=lifespan)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        if token is not None:
            got = request.headers.get("authorization", "")
            if not hmac.compare_digest(got.encode(), f"Bearer {token}".encode()):
                return JSONResponse({"detail": "a bearer token is required (Authorization: Bearer ...)"},
                                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
        if request.method == "POST":
            length = request.headers.get("content-length")
            if length is None:
                return JSONResponse({"detail": "a request body needs a Content-Length"}, status_code=411)
            if not length.isdigit() or int(length) > MAX_BODY_BYTES:
                return JSONResponse({"detail": f"request body over {MAX_BODY_BYTES} bytes"}, status_code=413)
        return await call_next(request)

    def checked(req: EvalRequest, common: dict | None = None) -> dict:
        options = {**(common or {}), **req.options}
        for key in ("timeout", "deadline", "compile_timeout", "pg_timeout"):
            value = options.get(key)
            if isinstance(value, (int, float)) and value > MAX_TIMEOUT_S:
                raise HTTPException(422, f"{key}={value}: at most {MAX_TIMEOUT_S:.0f} s here")
        if options.get("keep_job"):
            raise HTTPException(422, "keep_job: not through the service (job folders stay on this machine)")
        try:
            pool.check(req.problem, options)
        except UnknownProblem as e:
            raise HTTPException(404, str(e)) from None
        except EvaluateError as e:
            raise HTTPException(422, str(e)) from None
        return {"problem": req.problem, "code": req.code, "options": options, "id": req.id}

    def full(n: int) -> None:
        if not jobs.room(n):
            raise HTTPException(429, f"the queue is full ({jobs.pending()} evaluations pending, limit {jobs.limit}): "
                                     "retry later", headers={"Retry-After": "10"})

    @app.get(f"/{API}/health")
    async def health() -> dict:
        return {"status": "ok", "version": __version__, "api": API, "workers": pool.size,
                "queue": {"pending": jobs.pending(), "running": pool.running, "limit": jobs.limit},
                "gpus": gpu_leases()}

    @app.get(f"/{API}/problems")
    def problems() -> dict:
        from .evaluate import find_problem
        out = []
        for pid in list_problems(pool.problems_dir):
            try:
                p = find_problem(pid, pool.problems_dir)
            except Exception:  # noqa: BLE001 - a folder that does not load is listed as such
                out.append({"id": pid, "invalid": True})
                continue
            out.append({"id": p.id, "title": p.title, "category": p.category, "kind": p.kind,
                        "world_sizes": list(p.world_sizes), "devices": list(p.devices), "sizes": list(p.sizes),
                        "prompt": f"/{API}/problems/{p.id}/prompt"})
        return {"problems": out}

    @app.get(f"/{API}/problems/{{problem_id:path}}/prompt")
    def problem_prompt(problem_id: str, world_size: int | None = None, device: str | None = None) -> dict:
        try:
            return prompt_of(pool, problem_id, world_size, device)
        except UnknownProblem as e:
            raise HTTPException(404, str(e)) from None
        except (EvaluateError, ValueError, ProblemError) as e:     # ProblemError: a folder that does not load
            raise HTTPException(422, str(e)) from None

    @app.post(f"/{API}/evaluate")
    async def evaluate(req: EvalRequest) -> Any:
        request = checked(req)
        full(1)
        eval_id = jobs.submit(request)
        if req.wait:
            out = await jobs.wait(eval_id, req.wait)
            if out.get("status") == DONE:
                return out
        return JSONResponse({"id": eval_id, "status": QUEUED, "poll": f"/{API}/evaluations/{eval_id}"},
                            status_code=202)

    @app.get(f"/{API}/evaluations/{{eval_id}}")
    async def evaluation(eval_id: str, wait: float | None = None) -> dict:
        out = await jobs.wait(eval_id, min(wait, 600.0)) if wait else jobs.status(eval_id)
        if out is None or out.get("status") == "unknown":
            raise HTTPException(404, f"no evaluation {eval_id!r}")
        return out

    @app.post(f"/{API}/batches")
    async def batch(req: BatchRequest) -> Any:
        requests = [checked(r, req.options) for r in req.requests]
        full(len(requests))
        batch_id = secrets.token_hex(8)
        jobs.batches[batch_id] = [jobs.submit(r) for r in requests]
        return JSONResponse({"batch": batch_id, "ids": jobs.batches[batch_id],
                             "stream": f"/{API}/batches/{batch_id}/stream"}, status_code=202)

    @app.get(f"/{API}/batches/{{batch_id}}")
    async def batch_status(batch_id: str) -> dict:
        ids = jobs.batches.get(batch_id)
        if ids is None:
            raise HTTPException(404, f"no batch {batch_id!r}")
        results = [jobs.status(i) or {"id": i, "status": "unknown"} for i in ids]
        return {"batch": batch_id, "done": sum(r["status"] != QUEUED for r in results), "total": len(ids),
                "evaluations": results}

    @app.get(f"/{API}/batches/{{batch_id}}/stream")
    async def batch_stream(batch_id: str) -> Any:
        ids = jobs.batches.get(batch_id)
        if ids is None:
            raise HTTPException(404, f"no batch {batch_id!r}")

        async def lines() -> Any:
            waiting = {asyncio.ensure_future(jobs.wait(i, None)): i for i in ids}
            while waiting:
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    waiting.pop(task)
                    yield json.dumps(task.result(), default=str) + "\n"
        return StreamingResponse(lines(), media_type="application/x-ndjson")

    app.state.jobs = jobs
    return app


def prompt_of(pool: WorkerPool, problem_id: str, world_size: int | None, device: str | None) -> dict:
    from ..candidates import prompt
    from ..session import KBSession, Skip
    from ..spec import hardware, shapes
    from .evaluate import find_problem, settings_for
    problem = find_problem(problem_id, pool.problems_dir, pool.pkb)
    settings, _ = settings_for({"world_size": world_size, "device": device})
    session = KBSession(settings, pool.workdir, "prompt", "prompt", hardware.machine_info(),
                        pool.workdir / "prompt.json")
    try:
        placement = session.place(problem)
    except Skip as e:
        raise ValueError(f"{problem.id} does not run here: {e}") from None
    probed = shapes.probe(problem, placement.world_size, pool.workdir / ".kb-cache" / "shapes")
    msgs = prompt.messages(problem, placement, session.machine, probed, settings.compile_timeout, settings.timeout)
    return {"problem": problem.id, "world_size": placement.world_size, "device": placement.device,
            "messages": msgs, "prompt": prompt.render(msgs)}


def serve(host: str, port: int, token: str | None, workers: int | None = None, queue_limit: int = 256,
          problems_dir: str | None = None, pkb: str | None = None, out: IO[str] | None = None) -> int:
    """Run the service until interrupted. 2 (usage) when it cannot start as asked."""
    import sys
    out = out or sys.stderr
    try:
        check_bind(host, token)
        import fastapi  # noqa: F401
        import uvicorn
    except ServeError as e:
        print(f"kernelbench serve: {e}", file=out)
        return 2
    except ImportError:
        print("kernelbench serve: needs FastAPI and uvicorn: pip install 'pytest-kernelbench[serve]'", file=out)
        return 2
    pool = WorkerPool(workers, problems_dir, pkb)
    try:
        app = make_app(pool, token, queue_limit)
        print(f"kernelbench serve: http://{host}:{port}/{API}/health ({pool.size} workers, queue {queue_limit}"
              f"{', bearer token required' if token else ''}; started {time.strftime('%H:%M:%S')})", file=out,
              flush=True)
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        pool.close(kill=True)
    return 0
