"""The solver processes' own identity (issue 44, class 1): a uid and gid that own nothing of the
system, real outside every namespace. Dropping capabilities is not enough while the uid is 0: for
uid 0 the kernel's rules on /proc, /sys and /dev are file modes (kernel.core_pattern, a CPU's
online file, /dev/cpu_dma_latency and /proc/<pid>/autogroup are root's, mode 0644 or 0600), and a
user namespace does not help (the kernel checks the uid outside).

- One uid for the candidate processes of a job (NCCL's /dev/shm segments are 0600 and opened by
  the peer ranks' processes), another for its reference processes, so a candidate cannot signal,
  renice or write the /proc entries of the reference, nor of its checker (root). Both come from the
  job folder's path, known before the fork and the same on every rank; they need no secret: what
  matters is that nothing else runs under them.
- The checker (root) gives the candidate's scratch and build folders to its uid before the fork.
- A mount namespace of its own lets the new uid reach the folders it needs where an ancestor is
  closed to it (a run under /root or pytest's /tmp/pytest-of-root, both 0700): a tmpfs over that
  ancestor holds only the needed folders, bound from the real ones; the rest stays hidden.

Where the process is not root (a developer's machine) it already owns nothing of the system: it
keeps its identity and the layer is not reported. KB_SANDBOX_KEEP_UID=1 in the launcher's
environment (trusted side: read before any candidate code runs) keeps uid 0, as before issue 44.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import stat
from collections.abc import Iterable
from typing import NamedTuple

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
PR_SET_DUMPABLE = 4

# far above any account and above the subordinate ranges container runtimes map (100000 + 65536 k)
UID_BASE = 2_000_000_000
UID_PAIRS = 50_000_000          # stays below 2^31: some tools read a uid as a signed int
KEEP_UID_ENV = "KB_SANDBOX_KEEP_UID"


class Identity(NamedTuple):
    uid: int
    gid: int
    user: str           # USER/LOGNAME: getpass.getuser() (torch inductor, Triton) fails on a uid without a name


ROOT = Identity(0, 0, "root")


def job_identities(job_dir: str | os.PathLike[str]) -> tuple[Identity, Identity]:
    """(the candidate processes' identity, the reference processes') of the job at job_dir."""
    digest = hashlib.sha256(os.path.abspath(job_dir).encode()).digest()
    base = UID_BASE + 2 * (int.from_bytes(digest[:8], "big") % UID_PAIRS)
    return Identity(base, base, f"kb{base}"), Identity(base + 1, base + 1, f"kb{base + 1}")


def wanted() -> bool:
    """Whether the solver processes change identity here: only root can, and the trusted side may
    keep uid 0 (KEEP_UID_ENV) where a GPU machine's device nodes turn out closed to others."""
    return os.geteuid() == 0 and os.environ.get(KEEP_UID_ENV) != "1"


def give(paths: Iterable[str | os.PathLike[str]], ident: Identity) -> None:
    """The checker, before the fork: each folder and everything in it owned by `ident` (a build
    folder a job of the same source left is owned by that job's uid)."""
    for top in paths:
        for root, dirs, files in os.walk(top):
            for name in (root, *(os.path.join(root, n) for n in dirs + files)):
                try:
                    os.chown(name, ident.uid, ident.gid, follow_symlinks=False)
                except OSError:
                    pass


def env(ident: Identity) -> dict[str, str]:
    return {"USER": ident.user, "LOGNAME": ident.user}


def _searchable(path: str, ident: Identity) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return True         # nothing there to bind: not ours to fix
    if st.st_uid == ident.uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == ident.gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def closed_ancestor(path: str, ident: Identity) -> str | None:
    """The outermost folder above `path` that `ident` cannot pass through, or None."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        above = "/" + "/".join(parts[:i])
        if not _searchable(above, ident):
            return above
    return None


def unreachable(paths: Iterable[str], ident: Identity) -> bool:
    """Whether `ident` would miss one of `paths` without a mount namespace."""
    return any(closed_ancestor(os.path.abspath(p), ident) for p in paths if p and os.path.exists(p))


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if _libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(), ctypes.c_ulong(flags),
                   data and data.encode()) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {target}: {os.strerror(e)}")


def mount_namespace(paths: Iterable[str], ident: Identity) -> list[str] | None:
    """A mount namespace of this process's own in which `ident` reaches every path in `paths`
    (as root, before the switch). Returns the folders a tmpfs now covers (they hold only the
    paths: Python lists such a folder on sys.path to import from it, so Landlock lets it read
    them), or None where the kernel refuses (the process runs on without)."""
    plan: dict[str, list[str]] = {}
    for p in sorted({os.path.abspath(p) for p in paths if p and os.path.exists(p)}):
        closed = closed_ancestor(p, ident)
        if closed is not None and not any(p.startswith(q + "/") for q in plan.get(closed, [])):
            plan.setdefault(closed, []).append(p)
    if _libc.unshare(CLONE_NEWNS) != 0:
        return None
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)       # nothing of ours reaches the host's mounts
        fds = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for ps in plan.values() for p in ps}  # before they are hidden
        for closed, ps in plan.items():
            _mount("tmpfs", closed, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
            for p in ps:
                if os.path.isdir(f"/proc/self/fd/{fds[p]}"):
                    os.makedirs(p, 0o755, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(p), 0o755, exist_ok=True)
                    open(p, "a").close()
                _mount(f"/proc/self/fd/{fds[p]}", p, None, MS_BIND | MS_REC)
        for fd in fds.values():
            os.close(fd)
    except OSError:
        return None
    return list(plan)


def switch(ident: Identity) -> bool:
    """setgroups([]), setresgid, setresuid to `ident` (needs CAP_SETUID/CAP_SETGID: before the
    capabilities are cleared). Leaving uid 0 clears the permitted and effective capabilities."""
    parent = os.getppid()
    try:
        os.setgroups([])
        os.setresgid(ident.gid, ident.gid, ident.gid)
        os.setresuid(ident.uid, ident.uid, ident.uid)
    except OSError:
        return False
    # a change of credentials clears the parent-death signal: armed again, or a checker killed
    # with -9 left its solver processes running (tests/test_resume_and_user_errors.py)
    from ..procs import die_with_parent
    die_with_parent()
    if os.getppid() != parent:       # the checker died before the signal was armed again
        os._exit(70)
    return os.getresuid() == (ident.uid,) * 3 and os.getresgid() == (ident.gid,) * 3


def dumpable(on: bool) -> None:
    """A uid change makes the process non-dumpable (fs.suid_dumpable=0): its /proc entries become
    root's, which CUDA and torch reading their own /proc/self do not expect. The candidate process
    is made dumpable again (its checker reads its memory with CAP_SYS_PTRACE either way); the
    reference process stays non-dumpable."""
    _libc.prctl(PR_SET_DUMPABLE, 1 if on else 0, 0, 0, 0)
