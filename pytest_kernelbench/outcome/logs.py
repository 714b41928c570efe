"""Reading what the ranks left behind: their logs and the tracebacks of their error records.

The end of a rank's log (`logs_tail`; the one place log excerpts are made, C++ frame dumps and the
harness's frames of a stack dump dropped), the exception and harness frame of a traceback, whether
an error only says the rank waited for its peers in vain, the NCCL watchdog's line, and where a
rank's main thread was when it was stopped. What they mean for the job is judged in
outcome/__init__.py.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from ..protocol import PEER_LOST, Failure, JobLayout

TAIL_CHARS = 3000


def tail(path: Path, chars: int = TAIL_CHARS) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - chars))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def logs_tail(job_dir: Path, ranks: Iterable[int] | None = None) -> str:
    """The end of each rank's log (C++ frame dumps dropped: the one place log excerpts are made)."""
    parts = []
    for log in sorted(JobLayout(job_dir).logs.glob("rank*.log")):
        r = log.stem[4:]
        if ranks is None or (r.isdigit() and int(r) in ranks):
            t = clean_log(tail(log, 20000))[-1500:].strip()
            if t:
                parts.append(f"--- rank {r} ---\n{t}")
    return "\n".join(parts)


# C++ stack dumps (c10::Error backtraces, the NCCL watchdog's, gdb-style lines) say nothing a
# candidate's author can act on, and crowd the lines that do out of every excerpt
_CPP_FRAME = re.compile(r"^\s*(?:\[rank\d+\]:\s*)?(?:frame #\d+:|Exception raised from \S+ at \S+|"
                        r"C\+\+ CapturedTraceback:|<omitting python frames>|#\d+\s+0x[0-9a-fA-F]+ in |"
                        r"#\d+\s+\S.* from \S+:\d+\s*$)")


def _collapse(text: str, pattern: re.Pattern, note: Callable[[int], str]) -> str:
    """`text` without the lines `pattern` matches; each run of them becomes note(count)."""
    out, dropped = [], 0
    for line in text.splitlines(keepends=True):
        if pattern.match(line):
            dropped += 1
            continue
        if dropped:
            out.append(note(dropped))
            dropped = 0
        out.append(line)
    if dropped:
        out.append(note(dropped))
    return "".join(out)


def drop_cpp_frames(text: str) -> str:
    """`text` without C++ stack frame lines; each run of them becomes one short note."""
    return _collapse(text, _CPP_FRAME, lambda n: f"[{n} C++ stack frame line{'s' if n > 1 else ''} dropped]\n")


# the harness's own frames in the Python stack a rank dumps when stopped (faulthandler's format:
# no comma before "in"); the candidate's and torch's frames stay
_HARNESS_DUMP_FRAME = re.compile(r'^\s+File "(?:[^"]*[/\\]pytest_kernelbench[/\\][^"]*|<frozen runpy>)", '
                                 r'line \d+ in \S+\s*$')


def clean_log(text: str) -> str:
    """A log excerpt as reports and models see it: no C++ frames, no harness frames in stack dumps."""
    return _collapse(drop_cpp_frames(text), _HARNESS_DUMP_FRAME,
                     lambda n: f"  [{n} harness frame{'s' if n > 1 else ''}]\n")


_TB_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)', re.M)


def harness_frame(tb: str) -> str | None:
    """The innermost frame of a traceback in the problem's harness or in this package, as
    "harness.py line 12 in inputs()"."""
    frames = [(f, n, fn) for f, n, fn in _TB_FRAME.findall(tb)
              if os.path.basename(f) == "harness.py" or f"{os.sep}pytest_kernelbench{os.sep}" in f]
    if not frames:
        return None
    f, n, fn = frames[-1]
    return f"{os.path.basename(f) if os.path.basename(f) == 'harness.py' else f.split('pytest_kernelbench' + os.sep)[-1]}" \
           f" line {n} in {fn}()"


def trim_traceback(tb: str, lines: int = 12) -> str:
    keep = tb.splitlines()
    return "\n".join(keep[-lines:])


def _clip(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 3] + "..."


_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)(?::\s.*)?$")
_EXC_IN_TEXT = re.compile(r"(?<![\w.])(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception): ")
_SOURCE_TAG = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|cu|h|hpp):\d+\]\s*")   # "[.../unbound_buffer.cc:78] "


def exception_text(e: dict) -> str:
    """The Python exception of an error record ("RuntimeError: ..."), else its message."""
    for line in reversed(drop_cpp_frames(e.get("traceback") or "").splitlines()):
        if _EXC_LINE.match(line.rstrip()):
            return _clip(_SOURCE_TAG.sub("", line))
    msg = e.get("message") or ""
    found = list(_EXC_IN_TEXT.finditer(msg))     # "the reference failed (...): RuntimeError: ..."
    return _clip(_SOURCE_TAG.sub("", msg[found[-1].start():] if found else msg))


# a failure that only says the rank waited for its peers in vain (they stopped or died)
_WAITED = PEER_LOST
_WATCHDOG = re.compile(r"(?:Watchdog caught collective operation timeout|collective operation timeout)[^\n]*", re.I)


# of those, one that says a peer went away (its process ended): a consequence of whatever ended it
_LOST = re.compile(r"connection (?:closed|reset)|broken pipe|remote process exited|ncclRemoteError", re.I)


def waited_error(e: dict) -> bool:
    return e.get("category") == Failure.TIMEOUT or bool(_WAITED.search(exception_text(e)))


def lost_peer(e: dict) -> bool:
    return bool(_LOST.search(exception_text(e)))


def watchdog_line(log: str) -> str | None:
    """The NCCL watchdog's report of a collective that timed out waiting for peers, if any."""
    m = _WATCHDOG.search(log)
    return _clip(m.group(0), 240) if m else None


def raised_at(tb: str, candidate_path: str | None = None) -> str | None:
    """Where a rank's own error left candidate code, from its traceback (innermost candidate frame):
    "solution.py line 24 in solution(): dist.recv(buf, 0), waiting in torch.distributed", as
    stopped_at says it for a stack dump; None without a candidate frame."""
    frames = _TB_FRAME.findall(tb or "")
    own = [i for i, (f, _, _) in enumerate(frames) if _candidate_file(f, candidate_path)]
    if not own:
        return None
    f, n, fn = frames[own[-1]]
    inner = [g.replace(os.sep, "/") for g, _, _ in frames[own[-1] + 1:]]
    return _where(f, int(n), fn) + (", waiting in torch.distributed" if any("/torch/distributed/" in g for g in inner)
                                    else "")


def _candidate_file(f: str, candidate_path: str | None) -> bool:
    return bool(candidate_path and os.path.abspath(f) == os.path.abspath(candidate_path)) or \
        f.replace(os.sep, "/").endswith("/candidate/solution.py")


def _where(f: str, n: int, fn: str) -> str:
    try:
        src = Path(f).read_text(errors="replace").splitlines()[n - 1].strip()
    except (OSError, IndexError):
        src = ""
    return f"{os.path.basename(f)} line {n} in {fn}()" + (f": {_clip(src, 100)}" if src else "")


_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-fA-F]+.*\(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.+)", line (\d+) in (.+?)\s*$')


def stopped_at(log: str, candidate_path: str | None = None) -> dict | None:
    """Where a rank's main thread was when SIGTERM stopped it (the faulthandler dump in its log):
    {"in_candidate": innermost Python frame in candidate code (not in torch.distributed or the
    harness, which only wait there), "where": "solution.py line 12 in solution(): <source>"}."""
    blocks: list[list[tuple[str, int, str]]] = []
    cur: list[tuple[str, int, str]] | None = None
    for line in log.splitlines():
        if _THREAD.match(line):
            cur = []
            blocks.append(cur)
        elif cur is not None and line.strip():
            m = _FRAME.match(line)
            if m:
                cur.append((m.group(1), int(m.group(2)), m.group(3)))
            elif "<no Python frame>" not in line:
                cur = None
    main = [b for b in blocks if any("pytest_kernelbench" in f for f, _, _ in b)]
    if not main or not main[-1]:
        return None
    frames = main[-1]

    top = frames[0][0].replace(os.sep, "/")
    waiting = "/torch/distributed/" in top or "pytest_kernelbench" in top
    own = next(((f, n, fn) for f, n, fn in frames if _candidate_file(f, candidate_path)), None)
    where = None
    if own:
        where = _where(*own)
        if waiting:
            where += ", waiting in " + ("torch.distributed" if "/torch/distributed/" in top else "the harness")
    return {"in_candidate": bool(own) and not waiting, "where": where}
