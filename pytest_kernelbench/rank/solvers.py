"""The checker's two solver processes: the candidate process and the reference process, its twin
that times the reference through the same batch protocol. Both are forked before the checker holds
anything secret and hardened alike, so a window costs both sides the same: a reference timed in the
checker itself read 0.83-0.89 against itself at 256 MiB on an H100 (another CUDA context, another
core, no outputs to describe). On GPU machines both share one core (one of them is always stopped)
and the checker has another (cores.py). The reference process is non-dumpable, in a Landlock
domain of its own and, where the checker is root, under a uid other than the candidate's
(identity.py): the kernel refuses a candidate's renice of it. Its scheduling is still compared
before every reference window (scheduling_changes), for machines where the uid is kept."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

from ..protocol import JobLayout, JobSpec
from . import identity
from .link import Link, threads_of


def start(layout: JobLayout, job: JobSpec, rank: int, gpu_index: int) -> tuple[Link, Link | None]:
    """(the candidate process, the reference process or None when timing is off), both forked now,
    on GPU `gpu_index` for a CUDA job (JobSpec.gpu_of)."""
    import torch  # noqa: F401 - imported once here, not in each forked process (CUDA stays uninitialized)
    import torch.distributed  # noqa: F401
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}
    gpu = gpu_index if job.device == "cuda" else None
    # one identity for the job's candidate processes, another for its reference processes (identity.py)
    mine, theirs = identity.job_identities(layout.dir)
    change = identity.wanted()
    scratch, tmp = _scratch(layout.scratch(rank)), _shared(layout.solver_tmp("candidate"), mine)
    if change:
        identity.give([scratch, tmp, *job.builds], mine)
    elif os.geteuid() == 0:       # uid 0 kept (KB_SANDBOX_KEEP_UID=1): a build folder an earlier job left is root's again
        identity.give(job.builds, identity.ROOT)
    link = Link.start(str(layout.log(rank)), read_only=[str(layout.candidate)],
                      read_write=[str(scratch), str(tmp)] + list(job.builds), sys_path=list(job.sys_path),
                      env={**env, **_home(scratch, tmp), **identity.env(mine)}, cuda_device=gpu, ident=mine)
    if not job.timing.enabled:
        return link, None
    ref = job.reference_path          # its folder, where the file is and where a link to it points
    # its folder and the baselines' (spec/baselines.py), which it imports too
    ref_dirs = sorted({os.path.dirname(f(p)) for p in (ref, *job.baselines.values()) for f in (os.path.abspath, os.path.realpath)})
    scratch, tmp = _scratch(layout.reference_scratch(rank)), _shared(layout.solver_tmp("reference"), theirs)
    if change:
        identity.give([scratch, tmp], theirs)
    reference = Link.start(str(layout.reference_log(rank)),
                           read_only=ref_dirs + [p for p in job.sys_path if os.path.isdir(p)],
                           read_write=[str(scratch), str(tmp)], sys_path=list(job.sys_path),
                           env={**env, **_home(scratch, tmp), **identity.env(theirs)},
                           role="reference", cuda_device=gpu, ident=theirs)
    link.own.add(reference.pid)        # the checker's child, not one the candidate started
    return link, reference


def pin(link: Link | None, reference: Link | None, local_rank: int, local_world: int, gpu: str | None) -> dict | None:
    """The checker on a core of its own, both solver processes (every thread, and what they start
    later) together on another, chosen by the rank's GPU (its PCI address; cores.py); nothing where
    the machine has too few cores. Returns the cores taken, for the report."""
    from .cores import plan
    cpus = plan(local_rank, local_world, gpu)
    if cpus is None:
        return None
    os.sched_setaffinity(0, cpus.checker)
    for one in (link, reference):
        if one is not None and one.pid > 0:
            for tid in threads_of(one.pid):
                try:
                    os.sched_setaffinity(tid, cpus.solvers)
                except OSError:      # a thread that just ended
                    pass
            one.pinned = True
    return cpus.record()


def scheduling_changes(was: dict, now: dict, main: int) -> list[str]:
    """What changed in a process's scheduling (Link.scheduling) since `was`; a thread started
    later is held to the main thread's priority only (NCCL may pin its own threads)."""
    changed = []
    first = was["threads"].get(main)
    for tid, state in now["threads"].items():
        before = was["threads"].get(tid)
        if before is None and first is not None:
            before, state = first[1:], state[1:]
        if before is not None and state != before:
            changed.append(f"thread {tid}: cpus/nice/policy {before} -> {state}")
    if now["cgroup"] != was["cgroup"]:
        changed.append(f"cgroup {was['cgroup']!r} -> {now['cgroup']!r}")
    return changed


def _scratch(path: Path) -> Path:
    for sub in (".cache", ".nv"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    return path


def _shared(path: Path, ident: identity.Identity) -> Path:
    """The shared TMPDIR (JobLayout.solver_tmp), made by the first of the host's checkers. It sits in
    the world-writable /tmp: what another made there first (a link to a system folder, which give()
    would then hand over) is removed, unless it is a folder of ours or of `ident`'s."""
    for _ in range(3):
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode) and st.st_uid in (os.geteuid(), ident.uid):
                return path
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    raise RuntimeError(f"cannot make the solver processes' TMPDIR {path}")


def _home(scratch: Path, tmp: Path) -> dict[str, Any]:
    """Home and cache folders of a solver process, inside its own scratch; its TMPDIR, the one its
    role's processes of the job share on this host (JobLayout.solver_tmp)."""
    return {"HOME": str(scratch), "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(scratch / ".cache"),
            "CUDA_CACHE_PATH": str(scratch / ".nv"), "TORCHINDUCTOR_CACHE_DIR": str(scratch / ".cache" / "inductor")}
