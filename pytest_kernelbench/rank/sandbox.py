"""What the OS enforces on a candidate process, applied before any candidate code is imported:
no capabilities (ranks run as root on the GPU machines), no_new_privs, and Landlock where the kernel
has it: read and execute only in the system and Python trees, read-write only in the candidate's
scratch and build caches, nothing of the problem tree, the job's control files, other jobs, the
run's reports or the user's home; and (ABI >= 6) no signals to processes outside the sandbox.
Landlock also stops a sandboxed process from reading the memory of any process outside it.

Each layer that could not be applied is left out of the list `harden` returns, never silently:
the report and the header say which protections were in force (protocol.Isolation).
"""
from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterable

from ..protocol import Isolation

_libc = ctypes.CDLL(None, use_errno=True)
SYS_CREATE, SYS_ADD_RULE, SYS_RESTRICT = 444, 445, 446      # the same on every architecture
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 4, 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

# Landlock filesystem rights, by the ABI that introduced them
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
ABI1_ALL = (1 << 13) - 1
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
SCOPE_SIGNAL = 1 << 1

READ = EXECUTE | READ_FILE | READ_DIR
# system trees a Python/CUDA process reads (and executes: the host compiler, ptxas, ldconfig)
SYSTEM_TREES = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/opt", "/run", "/var", "/snap",
                "/nix", "/srv", "/mnt", "/media")


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where there is none."""
    if not sys.platform.startswith("linux"):
        return 0
    r = _libc.syscall(SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(r), 0)


class _Attr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _Beneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _all_rights(abi: int, ioctl: bool = True) -> int:
    rights = ABI1_ALL
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5 and ioctl:
        rights |= IOCTL_DEV
    return rights


def python_trees() -> list[str]:
    """Where this interpreter and its packages live (read-only for the candidate), but never the
    folder that holds the problem tree: only this package itself, from the project checkout."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))          # pytest_kernelbench/
    trees = {sys.prefix, sys.base_prefix, sys.exec_prefix, here}
    import site
    for p in [*site.getsitepackages(), site.getusersitepackages(), *sys.path]:
        if p and os.path.isdir(p) and ("site-packages" in p or "dist-packages" in p or p.startswith(sys.base_prefix)):
            trees.add(p)
    import torch
    trees.add(os.path.dirname(os.path.dirname(torch.__file__)))
    return sorted(t for t in trees if t and os.path.isdir(t))


# what the GPU driver and NCCL need in full: device nodes (read-write, ioctl), /dev/shm, and the
# kernel's /proc and /sys (the driver writes there; the kernel's own rules guard other processes)
FULL_TREES = ("/dev", "/proc", "/sys")


def landlock(read_only: Iterable[str], read_write: Iterable[str], devices: Iterable[str] = FULL_TREES,
             ioctl: bool = True, scope_signals: bool = True) -> list[str]:
    """Restrict this process (and what it starts) to the listed trees. Returns the layers applied."""
    abi = landlock_abi()
    if abi < 1:
        return []
    rights = _all_rights(abi, ioctl)
    scoped = scope_signals and abi >= 6
    attr = _Attr(rights, 0, SCOPE_SIGNAL if scoped else 0)
    size = ctypes.sizeof(_Attr) if abi >= 6 else ctypes.sizeof(ctypes.c_uint64)
    fd = _libc.syscall(SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        return []
    try:
        def allow(path: str, want: int) -> None:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                return
            try:
                granted = want & rights
                if not os.path.isdir(path):
                    granted &= FILE_ONLY
                _libc.syscall(SYS_ADD_RULE, fd, ctypes.c_uint32(1), ctypes.byref(_Beneath(granted, pfd)),
                              ctypes.c_uint32(0))
            finally:
                os.close(pfd)
        for p in read_only:
            allow(p, READ)
        for p in devices:
            allow(p, rights)         # GPU device nodes: read-write and ioctl; /dev/shm: NCCL's segments
        for p in read_write:
            allow(p, rights)
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if _libc.syscall(SYS_RESTRICT, fd, ctypes.c_uint32(0)) != 0:
            return []
    finally:
        os.close(fd)
    return [f"{Isolation.LANDLOCK.value} v{abi}"] + ([Isolation.SIGNALS.value] if scoped else [])


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> bool:
    """No capability left in any set (effective, permitted, inheritable, ambient, bounding), and
    no_new_privs: nothing the process runs can get one back. True when the effective set is empty."""
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:   # EINVAL: no more caps
            break
    _libc.capset(ctypes.byref(_CapHeader(0x20080522, 0)), (_CapData * 2)())
    return effective_capabilities() == 0


def effective_capabilities() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return -1


def nondumpable() -> None:
    """No /proc/<pid>/mem, environ or fd/ of this process for a process without CAP_SYS_PTRACE
    (the checker, the zygote and the pytest process hold what candidates must not read)."""
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def harden(read_only: Iterable[str], read_write: Iterable[str]) -> list[str]:
    """The candidate process's sandbox, in the order the kernel needs: Landlock (needs
    no_new_privs), then the capabilities. Returns the layers in force."""
    layers = [Isolation.PROCESS.value]
    layers += landlock([*SYSTEM_TREES, *python_trees(), *read_only], read_write)
    if drop_capabilities():
        layers.insert(1, Isolation.CAPS.value)
    return layers


def expected_layers() -> list[str]:
    """What harden() applies on this machine, for the run header (checked once, without hardening
    anything: each job's record says what was in force for it)."""
    abi = landlock_abi()
    out = [Isolation.PROCESS.value, Isolation.CAPS.value]
    if abi >= 1:
        out.append(f"{Isolation.LANDLOCK.value} v{abi}")
    if abi >= 6:
        out.append(Isolation.SIGNALS.value)
    return out
