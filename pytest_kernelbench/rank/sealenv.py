"""The multicast switches of a candidate process made read-only before any candidate code runs
(issue 44, class 5): sampling from outside (rank/envwatch.py) cannot see a switch flipped for 50 us.

`seal()` copies libc's `environ` array and the guarded strings (protocol.MULTICAST_OFF and
CUDA_VISIBLE_DEVICES) into one new mapping, points `environ` at it, makes it read-only and seals it
with mseal(2) (Linux >= 6.10), so that it can be neither written, nor made writable again, nor
unmapped or remapped: a rewrite of a guarded string in place (the pointer getenv returns) faults
the candidate process at once. What remains is a swap of a guarded slot of the array or of the
`environ` pointer itself (memory libc writes), seen by the watcher's sampling only. Where mseal is
refused the mapping is only read-only (mprotect can undo it).

The array must stay writable (libc's setenv writes an existing variable's slot in place, from C code
as well as for os.environ): `writable()` moves it to an ordinary buffer as soon as the strings are
sealed, its guarded slots still pointing at the sealed strings. `sealed_strings()` is the checker's look from outside: whether getenv's guarded strings
in a process lie in a read-only, sealed mapping (/proc/<pid>/smaps), never its own claim.
"""
from __future__ import annotations

import ctypes
import mmap
import os

from ..protocol import GUARDED_ENV

MSEAL_SYSCALL = 462          # mseal's number on x86-64 and arm64
PROT_READ = 1


class Seal:
    def __init__(self) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.environ = ctypes.c_void_p.in_dll(self.libc, "environ")
        self.start = self.size = 0
        self.sealed = False
        self.buffers: list = []        # arrays moved out (kept alive: libc points at them)

    def seal(self, names: tuple[str, ...] = GUARDED_ENV) -> str:
        """Copy, protect, seal; what is in force, in words (for the log)."""
        ptrs = _array(self.environ.value or 0)
        wanted = {n.encode() for n in names}
        strings = {i: ctypes.string_at(p) for i, p in enumerate(ptrs)}
        strings = {i: s for i, s in strings.items() if s.split(b"=", 1)[0] in wanted}
        size = -(-(8 * (len(ptrs) + 1) + sum(len(s) + 1 for s in strings.values())) // mmap.PAGESIZE) * mmap.PAGESIZE
        self.buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        start = ctypes.addressof(ctypes.c_char.from_buffer(self.buf))
        at = 8 * (len(ptrs) + 1)
        new = list(ptrs)
        for i, s in strings.items():
            self.buf[at:at + len(s) + 1] = s + b"\0"
            new[i] = start + at
            at += len(s) + 1
        for k, p in enumerate(new + [0]):
            self.buf[8 * k:8 * k + 8] = p.to_bytes(8, "little")
        self.environ.value = start
        self.start, self.size = start, size
        mprotect = self.libc.mprotect
        mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        if mprotect(start, size, PROT_READ) != 0:
            return f"the guarded environment strings could not be made read-only (errno {ctypes.get_errno()})"
        syscall = self.libc.syscall
        syscall.restype = ctypes.c_long
        syscall.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_ulong]
        self.sealed = syscall(MSEAL_SYSCALL, start, size, 0) == 0
        # the array itself at once in an ordinary buffer: C code that overwrites any variable (setenv
        # with overwrite=1, not through os.environ) writes its slot in place, and a sealed slot would
        # fault an honest process; a guarded slot swapped there is sampled, as an environ swap is
        self.writable()
        if not self.sealed:
            return (f"the guarded environment strings are read-only, not sealed (mseal refused: errno "
                    f"{ctypes.get_errno()}; Linux >= 6.10 seals them)")
        return "the guarded environment strings are read-only and sealed"

    def writable(self) -> None:
        """The environ array moved to an ordinary buffer (once, before the process changes its own
        environment): libc writes a changed or removed variable's slot in place. The guarded slots
        keep pointing at the sealed strings."""
        if not self.start or self.environ.value != self.start:
            return
        ptrs = _array(self.start)
        arr = (ctypes.c_void_p * (len(ptrs) + 1))(*ptrs, None)
        self.buffers.append(arr)
        self.environ.value = ctypes.addressof(arr)


def _array(p: int) -> list[int]:
    out: list[int] = []
    while p:
        v = ctypes.c_void_p.from_address(p + 8 * len(out)).value
        if not v:
            break
        out.append(v)
    return out


def sealed_strings(pid: int, names: tuple[str, ...] = GUARDED_ENV) -> bool:
    """From outside: every guarded variable set in the process lies in a read-only, sealed mapping
    (its `environ` array and strings read through /proc/<pid>/mem, its mappings' flags through
    /proc/<pid>/smaps). False where any is not, or anything cannot be read."""
    from .envwatch import _environ_address
    wanted = {n.encode() for n in names}
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        try:
            array = int.from_bytes(os.pread(fd, 8, _environ_address()), "little")
            raw = os.pread(fd, 8 * 4096, array)
            where = []
            for k in range(0, len(raw) - 7, 8):
                p = int.from_bytes(raw[k:k + 8], "little")
                if not p:
                    break
                if os.pread(fd, 128, p).split(b"=", 1)[0] in wanted:
                    where.append(p)
        finally:
            os.close(fd)
        if not where:
            return False
        sealed: list[tuple[int, int]] = []
        with open(f"/proc/{pid}/smaps") as f:
            span, perms = (0, 0), ""
            for line in f:
                head = line.split(None, 2)
                if "-" in head[0] and len(head) > 1 and len(head[1]) == 4:
                    a, b = head[0].split("-")
                    span, perms = (int(a, 16), int(b, 16)), head[1]
                elif head[0] == "VmFlags:" and perms.startswith("r-") and "sl" in line.split()[1:]:
                    sealed.append(span)
        return all(any(a <= p < b for a, b in sealed) for p in where)
    except (OSError, ValueError, OverflowError, IndexError):
        return False
