"""What the OS enforces on a candidate process, applied before any candidate code is imported:
an identity of its own that owns nothing of the system (identity.py: a uid and gid per job, real
outside, in a mount namespace of its own), no capabilities (ranks run as root on the GPU machines),
no_new_privs, and Landlock where the kernel has it: read and execute only in the system and Python
trees, read-write only in the candidate's scratch and build caches and the device nodes it needs
(DEVICE_NODES: the GPU's, /dev/shm, null and its kind), /proc and /sys read-only but for its own
/proc/<pid>; nothing of the problem tree, the job's control files, other jobs, the run's reports or
the user's home; and (ABI >= 6) no signals to processes outside the sandbox. Landlock also stops
a sandboxed process from reading the memory of any process outside it.

Each layer that could not be applied is left out of the list `harden` returns, never silently:
the report and the header say which protections were in force (protocol.Isolation).
KB_SANDBOX_FULL_TREES=1 in the launcher's environment (trusted: read before candidate code runs)
gives back all of /dev, /proc and /sys read-write, as before issue 44, where a GPU machine's driver
needs a node the list lacks.
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
from collections.abc import Iterable

from ..protocol import Isolation
from . import identity
from .identity import Identity

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


# before issue 44 (KB_SANDBOX_FULL_TREES=1): /dev, /proc and /sys read-write
FULL_TREES = ("/dev", "/proc", "/sys")
FULL_TREES_ENV = "KB_SANDBOX_FULL_TREES"
# the device nodes a Python/CUDA/NCCL process opens read-write (ioctl included): the GPU's (those
# present), NCCL's and torch's shared segments, a terminal for a compiler, the kernel's byte sources
DEVICE_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx",
                "/dev/pts", "/dev/shm", "/dev/nvidia*", "/dev/nvidia-caps", "/dev/nvidia-caps-imex-channels",
                "/dev/dri")
KERNEL_TREES = ("/proc", "/sys")          # read-only: the driver and NCCL read topology there


def device_rules() -> tuple[list[str], list[str]]:
    """(read-only trees, read-write nodes and folders) for the kernel's files and the devices."""
    if os.environ.get(FULL_TREES_ENV) == "1":
        return [], list(FULL_TREES)
    nodes = sorted({p for pattern in DEVICE_NODES for p in glob.glob(pattern)})
    return list(KERNEL_TREES), nodes + [f"/proc/{os.getpid()}"]     # its own /proc entries


def landlock(read_only: Iterable[str], read_write: Iterable[str], devices: Iterable[str] = FULL_TREES,
             ioctl: bool = True, scope_signals: bool = True, kernel: Iterable[str] = ()) -> list[str]:
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
        for p in kernel:
            allow(p, READ_FILE | READ_DIR)
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
    _drop_inheritable()
    return _clear_capabilities()


def _drop_inheritable() -> None:
    """The ambient and bounding sets (needs CAP_SETPCAP, still effective here)."""
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:   # EINVAL: no more caps
            break


def _clear_capabilities() -> bool:
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


def harden(read_only: Iterable[str], read_write: Iterable[str], ident: Identity | None = None) -> list[str]:
    """The candidate process's sandbox, in the order the kernel needs: the mount namespace (as
    root), Landlock (needs no_new_privs), the ambient and bounding capabilities (need CAP_SETPCAP),
    the identity (needs CAP_SETUID; leaving uid 0 clears the other sets), then what is left of the
    capabilities. `ident` None (or not root, or KB_SANDBOX_KEEP_UID=1): the identity is kept.
    Returns the layers in force."""
    layers = [Isolation.PROCESS.value]
    trees = [*SYSTEM_TREES, *python_trees(), *read_only]
    kernel, devices = device_rules()
    ident = ident if ident is not None and identity.wanted() else None
    covered = identity.mount_namespace([*trees, *read_write], ident) if ident is not None else None
    if covered is not None:
        layers.append(Isolation.MOUNTNS.value)
        trees += covered
    elif ident is not None and identity.unreachable([*trees, *read_write], ident):
        ident = None            # no namespace, and the new uid could not reach its folders: uid 0 kept, said so
    layers += landlock(trees, read_write, devices, kernel=kernel)
    if kernel and any(x.startswith(Isolation.LANDLOCK.value) for x in layers):
        layers.append(Isolation.DEVICES.value)
    _drop_inheritable()
    if ident is not None and identity.switch(ident):
        layers.append(Isolation.UID.value)
    if _clear_capabilities():
        layers.insert(1, Isolation.CAPS.value)
    return layers


def expected_layers() -> list[str]:
    """What harden() applies on this machine, for the run header (checked once, without hardening
    anything: each job's record says what was in force for it)."""
    abi = landlock_abi()
    out = [Isolation.PROCESS.value, Isolation.CAPS.value]
    if identity.wanted():
        out.append(Isolation.MOUNTNS.value)
    if abi >= 1:
        out.append(f"{Isolation.LANDLOCK.value} v{abi}")
    if abi >= 6:
        out.append(Isolation.SIGNALS.value)
    if abi >= 1 and os.environ.get(FULL_TREES_ENV) != "1":
        out.append(Isolation.DEVICES.value)
    if identity.wanted():
        out.append(Isolation.UID.value)
    return out
