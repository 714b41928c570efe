"""The NVLink-multicast switches of a candidate process, watched from outside it.

A candidate can rewrite its environment strings in place (through the pointer libc's getenv
returns), create a communicator while NVLS looks enabled, and restore the bytes before its call
returns, so that checks at the ends of calls see nothing. A small process forked by the checker
(before the checker holds anything secret) reads what getenv would return in the candidate, every
few milliseconds for as long as the candidate lives: libc's `environ` array and its strings,
through /proc/<pid>/mem (the candidate is forked from the checker, so `environ` is at the same
address). The first change goes to a pipe the checker polls after every batch. New variables set
through Python or ctypes are refused inside the candidate's own process (rank/multicast.py).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import signal
import time

from ..protocol import MULTICAST_OFF

MAX_ENTRIES = 4096
ADDRESS_END = 1 << 63           # past it no process maps anything (and pread's offset overflows)
SETTLE_TRIES, SETTLE_S = 3, 0.002     # an unreadable environment is read again this often before it counts
STALE_S = 10.0      # a watcher whose loop is late is waited for this long, then it no longer watches


def _environ_address() -> int:
    return ctypes.addressof(ctypes.c_void_p.in_dll(ctypes.CDLL(None), "environ"))


class _Env:
    """What getenv sees in another process: its `environ` array and strings, read from its memory.
    A full scan finds the slots that hold the watched names; later reads look at those slots only
    (a few reads: each one briefly holds the candidate's memory-map lock), and a moved array or
    slot, or every RESCAN-th read, scans again."""

    RESCAN = 50

    def __init__(self, pid: int, names: tuple[bytes, ...]):
        self.fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        self.where = _environ_address()
        self.names = names
        self.slots: dict[bytes, tuple[int, int]] = {}      # name -> (slot, string pointer)
        self.array, self.reads = 0, 0

    def _ptr(self, addr: int) -> int:
        if not 0 < addr < ADDRESS_END:      # pread refuses an offset past 2^63 with OverflowError
            raise OSError(f"no address {addr:#x}")
        data = os.pread(self.fd, 8, addr)
        if len(data) != 8:           # an address it does not map, or a process that has ended
            raise OSError(f"{len(data)} bytes at {addr:#x}")
        return int.from_bytes(data, "little")

    def _string(self, p: int) -> tuple[bytes, bytes]:
        if not 0 < p < ADDRESS_END:
            raise OSError(f"no string at {p:#x}")
        name, _, value = os.pread(self.fd, 128, p).split(b"\0", 1)[0].partition(b"=")
        return name, value

    def _scan(self) -> dict[bytes, bytes]:
        if not 0 < self.array < ADDRESS_END - 8 * MAX_ENTRIES:
            raise OSError(f"no environ array at {self.array:#x}")
        raw = os.pread(self.fd, 8 * MAX_ENTRIES, self.array)
        out: dict[bytes, bytes] = {}
        self.slots = {}
        for k in range(0, len(raw) - 7, 8):
            p = int.from_bytes(raw[k:k + 8], "little")
            if not p:
                break
            try:
                name, value = self._string(p)
            except OSError:
                continue
            if name in self.names and name not in out:     # getenv returns the first match
                out[name] = value
                self.slots[name] = (k // 8, p)
        return out

    def changed(self, want: dict[bytes, bytes]) -> str | None:
        """What differs from `want` (or why it cannot be read), only where it stays so over a few
        reads SETTLE_S apart: an honest setenv (torch's, NCCL's, os.environ's) moves the array
        while it is read, and a stale one holds whatever the allocator put there since (no names
        at all, or pointers past 2^63): the test suite saw both as false "unsafe" verdicts under
        load. A swap that lasts less than that was only ever sampled (docs/threat-model.md)."""
        found = None
        for attempt in range(SETTLE_TRIES):
            if attempt:
                self.slots = {}
                time.sleep(SETTLE_S)
            try:
                found = _changes(want, self.read())
            except Exception as e:  # noqa: BLE001 - anything it points environ at is judged, not obeyed
                found = f"its environment could not be read ({type(e).__name__}; environ at {self.array:#x})"
            if not found:
                return None
        return found

    def read(self) -> dict[bytes, bytes]:
        """What getenv sees now; raises for anything unreadable (whatever the candidate pointed
        `environ` at: an unmapped address, one past 2^63), which changed() judges."""
        array = self._ptr(self.where)
        self.reads += 1
        if array != self.array or self.reads % self.RESCAN == 0 or not self.slots:
            self.array = array
            return self._scan()
        out = {}
        for name, (slot, p) in self.slots.items():
            if self._ptr(array + 8 * slot) != p:
                return self._scan()
            got, value = self._string(p)
            if got != name:
                return self._scan()
            out[name] = value
        return out

    @staticmethod
    def state(pid: int) -> str:
        """Its scheduler state ("T": stopped, "Z": a zombie), "" once it is gone."""
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return ""


class EnvWatch:
    """Watches the candidate process and the reference process alike (the reference's slots cost
    its windows what the candidate's cost theirs); a stopped process is skipped."""

    def __init__(self, pids: list[int], interval_s: float):
        want = {k.encode(): v.encode() for k, v in MULTICAST_OFF.items() if os.environ.get(k) == v}
        r, w = os.pipe()
        self.beat = mmap.mmap(-1, 8)              # shared: the watcher's last loop, monotonic ns
        self.interval_s = interval_s
        self.watcher = os.fork()
        if self.watcher == 0:                     # the watcher: no secret exists in the checker yet
            os.close(r)
            code = 0
            try:
                from ..procs import die_with_parent
                die_with_parent()
                _watch(pids, want, w, interval_s, self.beat)
            except BaseException:  # noqa: BLE001 - the watcher never takes the checker down (gone() says so)
                code = 1
            os._exit(code)
        os.close(w)
        os.set_blocking(r, False)
        self.fd = r
        self.found: str | None = None
        self.exited: str | None = None
        self.want = want
        self.mine: dict[int, _Env] = {}           # the checker's own readers (now())

    def finding(self) -> str | None:
        """The first change seen so far, or None."""
        if self.found is None:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                data = b""
            if data:
                self.found = data.decode(errors="replace")
        return self.found

    def gone(self) -> str | None:
        """Why the watcher no longer watches (it exited, or its loop has not turned for STALE_S),
        or None while it does. Only the candidate can end it (e.g. an `environ` it cannot read
        used to kill it): the checker asks before every verdict."""
        if self.exited is None:
            try:
                pid, status = os.waitpid(self.watcher, os.WNOHANG)
            except ChildProcessError:
                pid, status = self.watcher, 0
            if pid:
                self.exited = f"it exited ({os.waitstatus_to_exitcode(status)})" if status else "it exited"
        if self.exited is not None:
            return self.exited
        # a loop late by more than a few turns is waited for (a loaded machine delays it), up to STALE_S
        deadline = time.monotonic() + STALE_S
        while True:
            last = int.from_bytes(self.beat[:8], "little")
            stale = (time.monotonic_ns() - last) / 1e9 if last else 0.0
            if stale <= max(1.0, 20 * self.interval_s):
                return None
            if time.monotonic() > deadline:
                return f"its loop has not turned for {stale:.1f} s"
            time.sleep(0.01)

    def now(self, pid: int) -> str | None:
        """The guarded variables of a process as getenv would return them, read by the checker
        itself at a verdict (its process stopped or between calls): a swap left in place at "done"
        is seen whatever the watcher's sampling; what differs, or why it cannot be read."""
        env = self.mine.get(pid)
        try:
            if env is None:
                env = self.mine[pid] = _Env(pid, tuple(self.want))
        except OSError as e:            # its memory cannot be opened
            found: str | None = f"its environment could not be read ({type(e).__name__})"
        else:
            found = env.changed(self.want)
        return None if found and _Env.state(pid) in ("", "Z", "X") else found      # gone: judged elsewhere

    def stop(self) -> None:
        try:
            os.kill(self.watcher, signal.SIGKILL)
            os.waitpid(self.watcher, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(self.fd)
        self.beat.close()
        for env in self.mine.values():
            os.close(env.fd)


def _changes(want: dict[bytes, bytes], now: dict[bytes, bytes]) -> str:
    return "; ".join(f"{k.decode()}={now.get(k, b'').decode(errors='replace')!r} (was {v.decode()!r})"
                     for k, v in want.items() if now.get(k) != v)


def _watch(pids: list[int], want: dict[bytes, bytes], w: int, interval_s: float, beat: mmap.mmap) -> None:
    """The watcher's loop: every process's guarded variables as getenv would see them, until the
    first change, or every process is gone. What it cannot read in a process that still runs (its
    `environ` pointed anywhere) is a finding, never the watcher's end."""
    envs = {pid: _Env(pid, tuple(want)) for pid in pids}
    while envs:
        beat[:8] = time.monotonic_ns().to_bytes(8, "little")
        for pid, env in list(envs.items()):
            state = env.state(pid)
            if state in ("T", "t"):              # stopped while the other side's window runs
                continue
            if state in ("", "Z", "X"):          # gone
                del envs[pid]
                continue
            changed = env.changed(want)
            if changed and env.state(pid) in ("", "Z", "X"):     # it ended while being read
                del envs[pid]
                continue
            if changed:
                os.write(w, changed[:1000].encode())
                envs.clear()
                break
        time.sleep(interval_s)
    beat[:8] = (0).to_bytes(8, "little")     # nothing left to watch: not stale
