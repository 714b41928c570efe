"""A checker's files in the job folder (protocol.JobLayout): heartbeat, error and result records,
the done mark signed with the job's key (which reached the checker in memory, never as a file),
and module loading. The candidate process cannot reach any of them (rank/sandbox.py)."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback

from ..protocol import JobLayout, atomic_write, done_mark, heartbeat_record


class JobFiles:
    def __init__(self, job_dir: str, rank: int, token: str, key: str | None = None):
        self.dir = job_dir
        self.layout = JobLayout(job_dir)
        self.rank = rank
        self.token = token
        self.key = key
        self.result_bytes = b""
        for sub in self.layout.subdirs():
            sub.mkdir(parents=True, exist_ok=True)
        self.beats, self._hb = 0, -1

    def heartbeat(self, phase: str):
        if self._hb < 0:
            self._hb = os.open(self.layout.heartbeat(self.rank), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.beats += 1
        os.pwrite(self._hb, heartbeat_record(self.beats, time.time(), phase), 0)

    def pids(self, checker: int, candidate: int, reference: int = 0, *helpers: int):
        """The rank's processes: its checker, candidate process, reference process and the checker's
        helpers (its environment watcher); all but the candidate process are trusted."""
        atomic_write(self.layout.pids(self.rank), " ".join(map(str, (checker, candidate, reference, *helpers))) + "\n")

    def error(self, category: str, message: str, where: str, exc: BaseException | None = None, tb: str = ""):
        tail = tb or ("".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:] if exc else "")
        atomic_write(self.layout.error(self.rank), json.dumps({
            "rank": self.rank, "category": category, "message": message[:2000], "where": where,
            "traceback": tail, "time": time.time()}))

    def done(self):
        atomic_write(self.layout.done(self.rank), done_mark(self.key, self.token, self.rank, self.result_bytes))

    def result(self, result: dict):
        text = json.dumps(result, indent=1, default=_jsonable)
        self.result_bytes = text.encode()
        atomic_write(self.layout.result, text)

    def redirect_output(self):
        """Send this rank's stdout/stderr (fd level, so C++ and child output too) to its log."""
        fd = os.open(self.layout.checker_log(self.rank), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)


def _jsonable(v: object) -> float | str:
    try:
        return float(v)   # type: ignore[arg-type]  # anything float() takes; the rest as text
    except Exception:
        return str(v)


def load_module(path: str, name: str, register: bool):
    """Import a file as a module. Harness and reference are not registered in sys.modules, so a
    candidate cannot pick them up by name."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
