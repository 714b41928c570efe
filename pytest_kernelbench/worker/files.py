"""A rank's files in the job folder: heartbeat, error and result records, and module loading.

The job folder layout is the contract with launch.py:
    job.json            what to run (written by the launcher)
    hb/rank<R>          the rank's current phase, one line, replaced atomically
    logs/rank<R>.log    the rank's stdout+stderr
    error/rank<R>.json  why the rank gave up (category, message, traceback tail)
    done/rank<R>        written by each rank that finished the protocol: done_mark() of the job
    result.json         written by rank 0 when every rank finished
    secret              the signing key and input nonce; read by every rank at start, deleted by
                        rank 0 before any candidate code runs (so neither a candidate nor a child
                        process of it can forge done/ and result.json, or predict other ranks' inputs)
"""
from __future__ import annotations

import hashlib
import hmac
import importlib.util
import json
import os
import sys
import time
import traceback

# in a heartbeat phase: the rank is in (or waits for its peers to finish) the first call of a
# size, which may compile (load_inline, Triton) and rendezvous; the launcher counts that time
# against the compile budget, not the run's deadline
SETUP_MARK = "(first call: setup/compile)"


def done_mark(key: str | None, token: str, rank: int, result_bytes: bytes = b"") -> str:
    """What done/rank<R> holds: an HMAC, under the job's secret key, of the token, the rank and
    (rank 0) the bytes of result.json. Without a key (an old launcher), the token."""
    if not key:
        return token
    msg = f"{token}|done|{rank}|{hashlib.sha256(result_bytes).hexdigest()}".encode()
    return hmac.new(key.encode(), msg, hashlib.sha256).hexdigest()


class JobFiles:
    def __init__(self, job_dir: str, rank: int, token: str, key: str | None = None):
        self.dir = job_dir
        self.rank = rank
        self.token = token
        self.key = key
        self.result_bytes = b""
        for sub in ("hb", "logs", "error", "done"):
            os.makedirs(os.path.join(job_dir, sub), exist_ok=True)

    def _write(self, rel: str, text: str):
        path = os.path.join(self.dir, rel)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)

    def heartbeat(self, phase: str):
        self._write(f"hb/rank{self.rank}", f"{time.time():.3f} {phase}\n")

    def error(self, category: str, message: str, where: str, exc: BaseException | None = None):
        tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:] if exc else ""
        self._write(f"error/rank{self.rank}.json", json.dumps({
            "rank": self.rank, "category": category, "message": message[:2000], "where": where,
            "traceback": tail, "time": time.time()}))

    def done(self):
        self._write(f"done/rank{self.rank}", done_mark(self.key, self.token, self.rank, self.result_bytes))

    def result(self, result: dict):
        text = json.dumps(result, indent=1, default=_jsonable)
        self.result_bytes = text.encode()
        self._write("result.json", text)

    def redirect_output(self):
        """Send this rank's stdout/stderr (fd level, so C++ and child output too) to its log."""
        fd = os.open(os.path.join(self.dir, "logs", f"rank{self.rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)


def _jsonable(v):
    try:
        return float(v)
    except Exception:
        return str(v)


def load_module(path: str, name: str, register: bool):
    """Import a file as a module. Harness and reference are not registered in sys.modules, so a
    candidate cannot pick them up by name."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
