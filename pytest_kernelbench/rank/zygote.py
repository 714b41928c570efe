"""The rank server's process: `python -m pytest_kernelbench.rank.zygote`.

It imports torch and the rank side once, then forks one fresh checker per rank the launcher asks
for (rankserver.py); each checker forks its own candidate process. It never loads a problem's or
a candidate's code and never holds a job's key (that reaches each checker from the launcher
directly), so a process forked from it has nothing to find in its memory; and no rank pays for
importing torch (about 2 s of CPU each on a CPU machine, most of a small item's cost).

Requests come on stdin, one JSON line each, and count only with the launcher's secret (its first
line); the secret lives only in memory each forked rank wipes first (Gate). The zygote is non-dumpable: a candidate process (no capabilities) cannot open its stdin
through /proc; a forged or garbled line would be dropped anyway, never obeyed. Replies and exit
codes go out on stdout as JSON lines. After each job the launcher has it kill whatever of its
children is still alive ("reap"). The zygote leaves when stdin closes and dies with its parent.
"""
from __future__ import annotations

import hmac
import json
import mmap
import os
import select
import signal
import sys
import tempfile

from ..procs import alive

MAX_LINE = 1 << 20
IDLE_S = 0.5        # the loop's longest sleep: a request or a rank's exit (SIGCHLD) wakes it at once


def _spawn(req: dict, out_fd: int, in_fd: int, wake: tuple[int, int], gate: Gate) -> int:
    pid = os.fork()
    if pid:
        return pid
    gate.wipe()         # before anything else: nothing of the launcher's lines in the rank
    code = 70
    try:   # the rank: the job's cgroup (contain.py), a new session (as torchrun's ranks), its own log, the job's environment
        if req.get("cgroup"):      # first: all it forks is born inside, killed whole at the job's end
            try:
                fd = os.open(os.path.join(req["cgroup"], "cgroup.procs"), os.O_WRONLY)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)
            except OSError:        # refused here: the launcher sees the rank outside and scans instead
                pass
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in (in_fd, out_fd, *wake):
            os.close(fd)
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        tempfile.tempdir = None     # TMPDIR is the job's now
        sys.argv = ["pytest_kernelbench.rank", req["job_dir"]]
        from .entry import main
        main([req["job_dir"]])      # leaves through os._exit
    except BaseException as e:      # noqa: BLE001 - the rank could not even start: say so in its log
        try:
            os.write(2, f"kernelbench zygote: rank start failed: {type(e).__name__}: {e}\n".encode())
        except OSError:
            pass
    os._exit(code)


def _reap_children() -> list[int]:
    """SIGKILL every living child of this process (ranks of a finished job, or anything a
    candidate left re-parented here); their exits are reported as usual."""
    me, killed = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(rest[1]) == me and alive(int(name)):
            try:
                os.kill(int(name), signal.SIGKILL)
                killed.append(int(name))
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def _say(fd: int, msg: dict) -> None:
    data = (json.dumps(msg) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


class Gate:
    """The launcher's requests, read straight into one anonymous mapping that every forked rank
    zeroes first (`wipe`), so no copy of the launcher's secret reaches a checker or a candidate
    process: the secret is compared where it lies and never becomes a Python object; a request's
    JSON is parsed without it. Lines are `{"secret": "<secret>", ...}` (json.dumps puts the key
    first); the first one sets the secret."""
    PREFIX = b'{"secret": "'
    SECRET_MAX = 256

    def __init__(self) -> None:
        # private: a rank's wipe zeroes its own copy, never the zygote's
        self.mem = mmap.mmap(-1, MAX_LINE + self.SECRET_MAX, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.view = memoryview(self.mem)
        self.fill = 0
        self.secret_len = 0

    def read(self, fd: int) -> bool:
        """More bytes from `fd` (False at its end); a line longer than MAX_LINE is dropped."""
        if self.fill >= MAX_LINE:
            self.fill = 0
        n = os.readv(fd, [self.view[self.fill:MAX_LINE]])
        self.fill += n
        return n > 0

    def requests(self) -> list[dict]:
        """Every complete line that carries the secret, as its request without it ({} for the first)."""
        out, start = [], 0
        while (end := self.mem.find(b"\n", start, self.fill)) >= 0:
            req = self._check(start, end)
            if req is not None:
                out.append(req)
            start = end + 1
        self.mem.move(0, start, self.fill - start)
        self.fill -= start
        return out

    def _check(self, a: int, b: int) -> dict | None:
        head = a + len(self.PREFIX)
        if b < head or self.mem[a:head] != self.PREFIX:
            return None
        close = self.mem.find(b'"', head, b)
        n = close - head
        if close < 0 or not 0 < n <= self.SECRET_MAX:
            return None
        if not self.secret_len:
            self.view[MAX_LINE:MAX_LINE + n] = self.view[head:close]
            self.secret_len = n
            return {}
        if n != self.secret_len or not hmac.compare_digest(self.view[head:close], self.view[MAX_LINE:MAX_LINE + n]):
            return None
        try:
            req = json.loads(b"{" + bytes(self.view[close + 1:b]).lstrip(b", "))
        except ValueError:
            return None
        return req if isinstance(req, dict) else None

    def wipe(self) -> None:
        """In a forked rank, first: its copy of the mapping is zero pages again."""
        self.mem.madvise(mmap.MADV_DONTNEED)


def serve(in_fd: int = 0, out_fd: int = 1) -> None:
    gate, ready = Gate(), False
    # a rank's exit wakes the loop at once (SIGCHLD writes to `wake`): the launcher learns that its
    # job ended without waiting out a poll
    wake = os.pipe()
    for fd in wake:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    while True:
        ready_fds, _, _ = select.select([in_fd, wake[0]], [], [], IDLE_S)
        if wake[0] in ready_fds:
            while True:
                try:
                    if not os.read(wake[0], 512):
                        break
                except BlockingIOError:
                    break
            ready_fds.remove(wake[0])
        while True:   # every rank that ended, with its exit code as torchrun reports it (-N: signal N)
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not pid:
                break
            _say(out_fd, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})
        if not ready_fds:
            continue
        if not gate.read(in_fd):
            return
        for req in gate.requests():
            if not ready:
                ready = True
                _say(out_fd, {"ready": os.getpid()})
                continue
            if req.get("op") == "ping":
                _say(out_fd, {"pong": req.get("id")})
            elif req.get("op") == "reap":     # the job is over: none of its processes may linger
                _say(out_fd, {"reaped": _reap_children(), "id": req.get("id")})
            elif req.get("op") == "spawn":
                import torch
                if torch.cuda.is_initialized():    # a forked CUDA context is unusable: never hand one out
                    _say(out_fd, {"id": req.get("id"), "error": "CUDA was initialized in the rank server"})
                    continue
                _say(out_fd, {"id": req.get("id"), "pid": _spawn(req, out_fd, in_fd, wake, gate)})


def main() -> None:
    from ..procs import die_with_parent
    from .sandbox import nondumpable
    die_with_parent()
    nondumpable()
    # what every checker and candidate process imports; nothing here touches CUDA (fork would copy
    # a dead context)
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401
    import torch.distributed._functional_collectives  # noqa: F401
    preload()
    serve()


# the rank side's own modules, imported once here rather than in every checker and solver process
# (50-100 ms a job; each is plain code: none reads the environment or touches CUDA on import)
RANK_MODULES = ("checker", "candidate", "sizes", "cuda", "cores", "foreign", "globalstate", "guards", "multicast",
                "shield", "stores", "exchange")


def preload() -> None:
    import importlib
    for name in RANK_MODULES:
        importlib.import_module(f"{__package__}.{name}")


if __name__ == "__main__":
    main()
