"""NVLink multicast must never run on the lent machines: a program that uses it can take the
host's GPUs out of service for a day. Two layers keep it off:

- here, in the pytest process (stdlib only, no candidate code runs): `scan()` refuses, before
  launch, any candidate whose text mentions multimem, multicast or NVLS anywhere (code,
  comments, CUDA/PTX source strings);
- inside the candidate processes (rank/multicast.py): an audit hook refuses changes to GUARDED_ENV and the
  driver entry points of multicast, and the guarded variables are checked after every call.

The launcher sets the multicast variables (MULTICAST_OFF) for every job unless the run allows
multicast.
"""
from __future__ import annotations

import re

from .protocol import GUARDED_ENV, MULTICAST_OFF  # noqa: F401 (re-exported)

_TOKEN = re.compile(r"[A-Za-z0-9_]*(?:multimem|multicast|nvls)[A-Za-z0-9_]*", re.IGNORECASE)
MAX_SHOWN = 4


def scan(source: str) -> str | None:
    """One line naming the multicast mentions in `source` (word and line of the first few), or
    None when there is none."""
    hits = []
    for lineno, line in enumerate((source or "").splitlines(), 1):
        for m in _TOKEN.finditer(line):
            hits.append((m.group(0), lineno))
    if not hits:
        return None
    shown = ", ".join(f"{word[:60]!r} at line {lineno}" for word, lineno in hits[:MAX_SHOWN])
    more = f" and {len(hits) - MAX_SHOWN} more" if len(hits) > MAX_SHOWN else ""
    return f"mentions NVLink multicast (never run on this machine): {shown}{more}"
