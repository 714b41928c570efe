"""A rank's files in the job folder: heartbeat, error and result records, and module loading.

The job folder layout is the contract with launch.py:
    job.json            what to run (written by the launcher)
    hb/rank<R>          the rank's current phase, one line, replaced atomically
    logs/rank<R>.log    the rank's stdout+stderr
    error/rank<R>.json  why the rank gave up (category, message, traceback tail)
    done/rank<R>        written by each rank that finished the protocol
    result.json         written by rank 0 when every rank finished
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback


class JobFiles:
    def __init__(self, job_dir: str, rank: int, token: str):
        self.dir = job_dir
        self.rank = rank
        self.token = token
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
        self._write(f"done/rank{self.rank}", self.token)

    def result(self, result: dict):
        self._write("result.json", json.dumps(result, indent=1, default=_jsonable))

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
