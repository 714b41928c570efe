"""Process lifetime of a job: ranks die with their parent, orphans come back to us (child
subreaper), and a hunter finds every process of a job (its token in the environment, its
sessions, its ancestry) and kills them until none is left. And, as a dev knob, when each process of
a job reaches its steps (mark)."""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time


def die_with_parent():
    """Linux: SIGKILL this process when its parent dies, so `kill -9` of pytest (or of torchrun)
    does not leave a job running on its own."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _proc_stat(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rindex(")") + 2:].split()
    return int(rest[1]), int(rest[3]), int(rest[19])  # ppid, sid, start time (clock ticks since boot)


def _has_token(pid: int, token: bytes) -> bool:
    """The job's token in the process's environment, read through any of its threads (once the
    main thread has exited, /proc/<pid>/environ can no longer be read; its other threads' can)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in [str(pid)] + [t for t in tids if t != str(pid)]:
        try:
            with open(f"/proc/{pid}/task/{tid}/environ", "rb") as f:
                data = f.read()
        except OSError:
            continue
        if data:
            return token in data
    return False


def _pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


class ProcessHunter:
    """Remembers the job's processes and sessions while it runs; kills all of them at the end."""

    def __init__(self, roots: int | list[int], token: str, ignore: set[int] | None = None):
        """`roots`: torchrun's pid, or the ranks' pids when the rank server forked them (each in its
        own session); `ignore`: our own long-lived children (the rank server), never the job's."""
        self.agent = isinstance(roots, int)    # torchrun: stopping it stops the ranks
        self.roots = {roots} if isinstance(roots, int) else set(roots)
        self.ignore = set(ignore or ())
        self.token = f"KB_JOB_TOKEN={token}".encode()
        self.known: set[int] = set(self.roots)
        self.sessions: set[int] = set(self.roots)
        starts = [st[2] for p in self.roots if (st := _proc_stat(p))]
        self.started = min(starts) if starts else 0

    def scan(self) -> set[int]:
        me, my_sid = os.getpid(), os.getsid(0)
        stats = {pid: st for pid in _pids() if pid != me and pid not in self.ignore and (st := _proc_stat(pid))}
        found = set()
        changed = True
        while changed:
            changed = False
            for pid, (ppid, sid, start) in stats.items():
                if pid in found:
                    continue
                # re-parented to us (the subreaper): started during this job, or of any age from a
                # session not ours (a process we start ourselves keeps our session; one a job left,
                # even an earlier job, never has it)
                orphan = ppid == me and pid not in self.roots and (start >= self.started or sid != my_sid) \
                    and _SUBREAPER[0]
                if pid in self.known or ppid in found or ppid in self.known or sid in self.sessions \
                        or orphan or _has_token(pid, self.token):
                    found.add(pid)
                    changed = True
        living = {p for p in found if alive(p)}
        self.known |= living
        self.sessions |= {stats[p][1] for p in living if p in stats and stats[p][1] != os.getsid(0)}
        return living

    def kill_all(self, grace_s: float = 3.0, terminate_root: bool = True) -> list[int]:
        """SIGTERM the roots (torchrun then stops its ranks; forked ranks dump their stacks), then
        SIGKILL whatever is left, until none is."""
        for root in self.roots:
            if terminate_root:
                _signal(root, signal.SIGTERM)
            else:
                self.known.discard(root)   # already reaped: its pid may be reused
        end = time.monotonic() + grace_s
        while time.monotonic() < end and self.scan() - (self.roots if self.agent else set()):
            time.sleep(0.1)
        killed = []
        for _ in range(50):
            self.reap()
            left = self.scan()
            if not left:
                break
            for pid in left:
                if _signal(pid, signal.SIGKILL):
                    killed.append(pid)
            gone_by = time.monotonic() + 0.1       # a SIGKILL lands within microseconds; a fork may not
            while time.monotonic() < gone_by and any(alive(p) for p in left):
                time.sleep(0.002)
        self.reap()
        return sorted(set(killed))

    def reap(self):
        """Collect the exit status of orphans re-parented to us (as subreaper), never torchrun's."""
        me, my_sid = os.getpid(), os.getsid(0)
        for pid in _pids():
            st = _proc_stat(pid)
            if st and st[0] == me and pid not in self.roots and pid not in self.ignore \
                    and (st[2] >= self.started or st[1] != my_sid):
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass


_SUBREAPER = [False]


def become_subreaper() -> bool:
    """prctl(PR_SET_CHILD_SUBREAPER): orphans of our descendants are re-parented to this process."""
    if not _SUBREAPER[0] and sys.platform.startswith("linux"):
        try:
            _SUBREAPER[0] = ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            pass
    return _SUBREAPER[0]


PF_EXITING = 0x4       # task flag: the thread is in exit and never returns to user space


def alive(pid: int) -> bool:
    """Whether any thread of the process can still run its code. The main thread's state alone
    is not enough: once it has exited (pthread_exit) /proc shows the process as a zombie while its
    other threads run on; a thread already exiting (a SIGKILL taken) counts as gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:     # a thread that just ended
            continue
        if rest[0] not in ("Z", "X") and not int(rest[6]) & PF_EXITING:
            return True
    return False


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


# ---- is a job compiling? ---------------------------------------------------------------------
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
ACTIVE_CPU_S = 0.05         # CPU seconds between two samples that count as work being done


def cpu_times(pid: int) -> tuple[float, float] | None:
    """(own user+system CPU s, CPU s of its reaped children) of a process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    own = (int(rest[11]) + int(rest[12])) / CLK_TCK
    children = (int(rest[13]) + int(rest[14])) / CLK_TCK
    return own, children


def tree_state(dirs: list[str]) -> tuple[int, int, float]:
    """(files, bytes, newest mtime) under the folders: a build or cache that grows shows here."""
    files, size, newest = 0, 0, 0.0
    for root in dirs:
        for dirpath, _, names in os.walk(root):
            for n in names:
                try:
                    st = os.stat(os.path.join(dirpath, n))
                except OSError:
                    continue
                files, size, newest = files + 1, size + st.st_size, max(newest, st.st_mtime)
    return files, size, newest


class Activity:
    """Tells a compile from a hang, from outside the ranks: a job is active when, since the last
    sample, a process of the job other than its ranks (a compiler, ninja, ptxas, a build helper)
    used CPU, a rank's reaped children did, a watched build/cache folder changed, or a rank that
    is still importing the candidate used CPU itself (Triton and torch.compile compile in-process).
    A rank's own CPU in a call is not counted: a rank spinning on a flag its peer never sets
    burns CPU too, and must meet the deadline, not the compile budget."""

    def __init__(self, dirs: list[str]):
        self.dirs = [d for d in dirs if d]
        self.cpu: dict[int, tuple[float, float]] = {}
        self.tree = tree_state(self.dirs)

    def sample(self, job_pids: set[int], ranks: set[int], importing: set[int]) -> bool:
        active = False
        seen = {}
        for pid in job_pids:
            now = cpu_times(pid)
            if now is None:
                continue
            seen[pid] = now
            own0, kids0 = self.cpu.get(pid, (0.0, 0.0) if pid not in ranks else now)
            own, kids = now[0] - own0, now[1] - kids0
            if pid in ranks:
                active |= kids >= ACTIVE_CPU_S or (pid in importing and own >= ACTIVE_CPU_S)
            else:
                active |= own + kids >= ACTIVE_CPU_S
        self.cpu = seen
        tree = tree_state(self.dirs)
        active |= tree != self.tree
        self.tree = tree
        return active



def parent_of(pid: int) -> int | None:
    st = _proc_stat(pid)
    return st[0] if st else None


def has_token(pid: int, token: str) -> bool:
    """Whether a process carries the job's token in its environment."""
    return _has_token(pid, f"KB_JOB_TOKEN={token}".encode())


def mark(what: str) -> None:
    """A dev knob: with KB_DEV_MARKS=<folder>, the launcher, each checker and each solver process
    note when they reach the steps of a job (CLOCK_MONOTONIC: one clock for every process of the
    host), for bench/job_timeline.py to put on one line. Off, the default, it costs one lookup. A
    process that cannot write the folder (a sandboxed candidate) writes the line to its log."""
    folder = os.environ.get("KB_DEV_MARKS")
    if not folder:
        return
    line = f"KBMARK {os.getpid()} {time.monotonic():.6f} {what}\n"
    try:
        with open(os.path.join(folder, f"{os.getpid()}.marks"), "a") as f:
            f.write(line)
    except OSError:
        sys.stderr.write(line)
