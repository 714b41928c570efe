"""The generation cache: every model answer on disk, so a rerun makes no API call.

Key: sha256 over (model, prompt digest, sampling parameters, sample index, round). A later
round's prompt holds the earlier rounds' feedback (measured times, error values), which differs
between runs even for the same code, so every entry is also indexed by its lineage: the first
round's prompt digest plus, per earlier round, the candidate's sha256 and how it ended
(outcome/failure). A rerun whose candidates end the same way as before thus replays the cached
refinement instead of paying for it again. Lookups try the exact key first, then the lineage.

Layout: <dir>/<key[:2]>/<key>.json (atomic writes), <dir>/lineage/<lineage>.json -> key,
<dir>/locks/<key>.lock (filelock): xdist workers and concurrent runs that want the same
generation wait for one call instead of making two.
"""
from __future__ import annotations

import hashlib
import json
import time
from contextlib import contextmanager
from pathlib import Path


from ..protocol import atomic_write

VERSION = 1


def _h(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def key(model: str, prompt_digest: str, params: dict, sample: int, round_no: int) -> str:
    return _h({"v": VERSION, "model": model, "prompt": prompt_digest, "params": params,
               "sample": sample, "round": round_no})


def lineage(model: str, first_digest: str, params: dict, sample: int, round_no: int, trail: list) -> str:
    """trail: [(candidate sha256 or None, outcome, failure), ...] of the rounds before this one."""
    return _h({"v": VERSION, "model": model, "first": first_digest, "params": params, "sample": sample,
               "round": round_no, "trail": [list(t) for t in trail]})


class GenerationCache:
    def __init__(self, directory: Path):
        self.dir = Path(directory)

    def _path(self, k: str) -> Path:
        return self.dir / k[:2] / f"{k}.json"

    def _lineage_path(self, lin: str) -> Path:
        return self.dir / "lineage" / f"{lin}.json"

    @contextmanager
    def locked(self, k: str, timeout: float = 3600.0):
        lock_dir = self.dir / "locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        from filelock import FileLock  # here, not at import: the plugin loads without its runtime packages
        with FileLock(str(lock_dir / f"{k}.lock"), timeout=timeout):
            yield

    def get(self, k: str, lin: str | None = None) -> tuple[dict | None, str | None]:
        """(entry, how: 'exact' | 'lineage') or (None, None)."""
        entry = _read(self._path(k))
        if entry is not None:
            return entry, "exact"
        if lin:
            ref = _read(self._lineage_path(lin))
            if ref and ref.get("key"):
                entry = _read(self._path(ref["key"]))
                if entry is not None:
                    return entry, "lineage"
        return None, None

    def put(self, k: str, entry: dict, lin: str | None = None):
        entry = {**entry, "key": k, "lineage": lin, "stored": time.time()}
        _write(self._path(k), entry)
        if lin:
            _write(self._lineage_path(lin), {"key": k})


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write(path: Path, obj: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(obj, indent=1, default=str))
