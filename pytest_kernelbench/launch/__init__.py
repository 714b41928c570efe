"""Run one job's ranks with a deadline, and leave no process behind.

The ranks come from the rank server (rankserver.py: forked from a process that has imported
torch, the default) or from torchrun (`--kb-launcher=torchrun`). Either way every rank runs in
its own session, so killing one process group alone orphans the ranks. Every process a job
starts carries KB_JOB_TOKEN in its environment (a forked rank is known by its pid); on the way
out we kill, by pid, every process that has the token, belongs to a session we saw in the job's
tree, or descends from one of those, and check again until none is left. The launching process is a
child subreaper (Linux), so a daemon that double-forks, calls setsid and drops its environment
is re-parented to us instead of init, and is found as our own child started during the job.

The trust chain: each rank is a checker (trusted) and its candidate process (sandboxed,
rank/sandbox.py). The launcher hands the job's one-time key and input nonce to each checker over
the job's control socket (keyservice.py), in memory, never as a file; a result counts only when
every done/rank<R> file carries the HMAC of that key (protocol.done_mark). The problem tree is
snapshotted before the job and compared after it: any change is undone and fails the item.
"""
from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..outcome import LaunchOutcome, classify, deadline_message, logs_tail, read_phases, setup_phase
from ..procs import Activity, ProcessHunter, become_subreaper, die_with_parent, has_token, parent_of
from ..protocol import MULTICAST_OFF, JobLayout, JobSpec, child_pythonpath
from .base import Launcher, LaunchError
from .fork import ForkedRanks, RankServer, RankServerError
from .keyservice import KeyService

LOG_LIMIT_BYTES = int(os.environ.get("KB_LOG_LIMIT_BYTES") or 8 << 20)   # per rank log
SAFE_ENV = {  # NVLink multicast must stay off on the lent machines (safety.py); hangs must surface fast
    **MULTICAST_OFF,
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "0", "TORCH_FR_BUFFER_SIZE": "0",   # the flight recorder off (its current name)
    "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "500", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    "TORCH_NCCL_ENABLE_MONITORING": "0", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
}


def snapshot_tree(roots: Iterable[str | Path], digest: bool = False) -> dict:
    """Every file under the roots -> its bytes (or sha256 when `digest`), to compare after a job."""
    snap = {}
    for root in roots:
        root = Path(root)
        if root.is_dir():
            for p in root.rglob("*"):
                if "__pycache__" not in p.parts and ".git" not in p.parts and p.is_file():
                    try:
                        data = p.read_bytes()
                    except OSError:
                        continue
                    snap[p] = hashlib.sha256(data).digest() if digest else data
    return snap


def restore_tree(root: Path, before: dict, quarantine: Path) -> list[str]:
    """Undo every change under `root` since `before` (bytes); what changed is first moved into
    `quarantine`, so nothing is ever lost. Returns the changed paths."""
    now = snapshot_tree([root])
    changed = sorted(str(p) for p in set(before) | set(now) if before.get(p) != now.get(p))
    for name in changed:
        p = Path(name)
        try:
            if p.exists() or p.is_symlink():
                dst = quarantine / p.relative_to(root)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(p), dst)
            if p in before:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(before[p])
        except OSError:
            pass
    return changed


def cap_logs(job_dir: Path, limit: int = LOG_LIMIT_BYTES) -> list[str]:
    """Keep each log under `limit` without stopping the writer: ranks append (O_APPEND), so a
    truncation just restarts the file; its first bytes are saved once as <log>.head."""
    cut = []
    for log in (job_dir / "logs").glob("*.log"):
        try:
            if log.stat().st_size > limit:
                head = log.with_suffix(".head")
                if not head.exists():
                    with open(log, "rb") as f:
                        head.write_bytes(f.read(64 << 10))
                os.truncate(log, 0)
                cut.append(log.name)
        except OSError:
            pass
    return cut


def run_job(job_dir: Path, job: JobSpec, nonce: str, nproc: int, timeout_s: float, compile_timeout_s: float = 600.0,
            cuda_devices: list[int] | None = None, extensions_dir: str | None = None,
            server: RankServer | None = None, launcher: Launcher | None = None) -> LaunchOutcome:
    """Write job.json, start the ranks (forked by `server`, else torchrun), wait under the
    deadline, classify what happened."""
    job_dir = Path(job_dir)
    layout = JobLayout(job_dir)
    layout.logs.mkdir(parents=True, exist_ok=True)
    cwd = layout.cwd
    cwd.mkdir(exist_ok=True)
    key = secrets.token_hex(32)
    job.write(layout.job)
    protected = job.protected
    tree_before = snapshot_tree(protected)
    become_subreaper()
    env = _env(job.token, cuda_devices, extensions_dir, allow_multicast=job.allow_multicast)
    # torchrun's torchelastic_* folder and the ranks' temporary files stay inside the job folder
    # and go with it, instead of piling up in /tmp
    (job_dir / "tmp").mkdir(exist_ok=True)
    env["TMPDIR"] = str(job_dir / "tmp")
    t0 = time.monotonic()
    proc: Any = None      # subprocess.Popen (torchrun) | ForkedRanks | a Launcher's Ranks

    def is_checker(pid: int) -> bool:     # who may have the key: a checker this launcher started
        if isinstance(proc, ForkedRanks):
            return pid in proc.pids.values()
        return proc is not None and parent_of(pid) == proc.pid and has_token(pid, job.token)
    keys = KeyService(JobLayout.control(job.token), key, nonce, is_checker)
    try:
        if server is not None:
            try:
                proc = ForkedRanks(server, job_dir, nproc, env, cwd)
            except RankServerError as e:
                return LaunchOutcome("error", "harness_error", f"could not start the ranks: {e}",
                                     wall_s=time.monotonic() - t0, log_tail=logs_tail(job_dir))
            hunter = ProcessHunter(list(proc.pids.values()), job.token, ignore={server.pid} if server.pid else None)
        elif launcher is not None:      # a Launcher strategy (launch/slurm.py; the registry will take this over)
            try:
                proc = launcher.start(job_dir, nproc, env, cwd)
            except LaunchError as e:
                return LaunchOutcome("error", "harness_error", f"could not start the ranks: {e}",
                                     wall_s=time.monotonic() - t0, log_tail=logs_tail(job_dir))
            proc.hand_over({"key": key, "nonce": nonce})     # on the step's stdin (rank/steps.py)
            hunter = ProcessHunter(proc.roots(), job.token)
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                   "--max-restarts=0", "--monitor-interval=0.1", "-m", "pytest_kernelbench.rank", str(job_dir)]
            with open(layout.logs / "torchrun.log", "ab") as out:
                proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent)
            hunter = ProcessHunter(proc.pid, job.token)
        try:
            timed_out, compile_s, truncated = _wait(proc, hunter, job_dir, t0, timeout_s, compile_timeout_s, job.builds)
        except BaseException:
            # pytest-timeout's outer net, Ctrl-C, ...: never leave the job running behind us
            hunter.kill_all()
            raise
    finally:
        keys.close()
    wall = time.monotonic() - t0
    phases = read_phases(job_dir)
    if timed_out:
        if launcher is not None:
            proc.terminate()     # every rank on every node gets SIGTERM (stack dumps), then SIGKILL
        killed = hunter.kill_all()
        proc.wait(timeout=10)
        if server is not None:
            killed += server.reap()
            server.check()
        _cleanup(layout)
        outcome = LaunchOutcome("failed", "timeout", deadline_message(timed_out, job_dir, phases, job.candidate_path),
                                returncode=proc.returncode,
                                wall_s=wall, compile_s=compile_s, rank_phases=phases, killed=killed,
                                log_tail=logs_tail(job_dir))
        return _check_tree(outcome, protected, tree_before, job_dir)
    killed = hunter.kill_all(grace_s=0.0, terminate_root=False)   # strays a candidate left behind (children, daemons)
    if server is not None:
        killed += server.reap()   # nothing of this job lingers in the zygote's family
        server.check()    # a zygote a candidate stopped or killed is replaced before the next item
    _cleanup(layout)
    rc = proc.returncode if proc.returncode is not None else -1
    outcome = classify(job_dir, job.token, nproc, rc, key, job.candidate_path)
    outcome.wall_s, outcome.compile_s, outcome.rank_phases, outcome.killed = wall, compile_s, phases, killed
    if truncated:
        outcome.message += f" [log truncated: {', '.join(sorted(truncated))} exceeded {_size(LOG_LIMIT_BYTES)}]"
    return _check_tree(outcome, protected, tree_before, job_dir)


def _cleanup(layout: JobLayout) -> None:
    """What a finished job leaves only for people: logs, the candidate, the result. Temporary and
    scratch folders go (a build cache lives apart, keyed by the candidate's source)."""
    shutil.rmtree(layout.tmp, ignore_errors=True)
    shutil.rmtree(layout.dir / "scratch", ignore_errors=True)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def _check_tree(outcome: LaunchOutcome, protected: list[str], before: dict, job_dir: Path) -> LaunchOutcome:
    """A job must leave every protected tree (the problem tree, a PKB checkout) as it found it. Any
    change fails the item and is undone; what changed is kept in the job's quarantine/. (A person's
    edit during a run is undone too: a benchmark's problems do not change under it.)"""
    changed = []
    for root in protected:
        changed += restore_tree(Path(root), {p: b for p, b in before.items() if Path(p).is_relative_to(root)},
                                job_dir / "quarantine" / Path(root).name)
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        outcome.message = (f"the job modified the problem tree (undone; changed files kept in "
                           f"{job_dir / 'quarantine'}): {shown}"
                           + (f"; before that: {outcome.category}: {outcome.message}" if outcome.category else ""))
        outcome.status, outcome.category, outcome.result = "failed", "forbidden_call", None
    return outcome


ACTIVITY_EVERY_S = 0.5
# a setup phase counts as compiling while activity was seen this recently (a compile has pauses:
# ninja between two compiler runs, a rank loading what was built)
ACTIVITY_HOLD_S = 3.0


def _job_pids(layout: JobLayout, nproc: int) -> tuple[set[int], dict[int, int]]:
    """(checker pids, rank -> candidate pid), as each checker wrote them (hb/pids<R>)."""
    checkers, candidates = set(), {}
    for r in range(nproc):
        try:
            checker, candidate = (int(x) for x in layout.pids(r).read_text().split())
        except (OSError, ValueError):
            continue
        checkers.add(checker)
        candidates[r] = candidate
    return checkers, candidates


def _wait(proc: subprocess.Popen | ForkedRanks, hunter: ProcessHunter, job_dir: Path, t0: float, timeout_s: float,
          compile_timeout_s: float, watch_dirs: list[str]):
    """Wait for the job under its deadline. Setup phases (importing the candidate, the first call of
    each size) are on the compile budget instead, but only while the job shows compile activity
    (procs.Activity): a rank that hangs in its first call while its peers wait meets the deadline,
    not the compile budget."""
    compile_s, last, last_scan, truncated = 0.0, t0, 0.0, set()
    layout = JobLayout(job_dir)
    nproc = proc.nproc if isinstance(proc, ForkedRanks) else 0
    activity, last_sample, active_at = Activity(watch_dirs + [str(layout.dir / "scratch")]), 0.0, -1e9
    agent = {proc.pid} if isinstance(proc, subprocess.Popen) else set()
    timed_out = None
    while proc.poll() is None:
        time.sleep(0.05)
        now = time.monotonic()
        phases = read_phases(job_dir)
        setup = any(setup_phase(p) for p in phases.values())
        if setup and now - last_sample >= ACTIVITY_EVERY_S:
            checkers, candidates = _job_pids(layout, nproc or len(phases))
            importing = {pid for r, pid in candidates.items() if phases.get(r) == "import candidate"}
            if activity.sample(hunter.scan() - agent - checkers, set(candidates.values()), importing):
                active_at = now
            last_sample = now
        if setup and now - active_at <= ACTIVITY_HOLD_S:
            compile_s += now - last  # compiling a CUDA candidate does not eat the run's deadline
        last = now
        if now - last_scan > 1.0:
            hunter.scan()
            truncated.update(cap_logs(job_dir, LOG_LIMIT_BYTES))
            last_scan = now
        if compile_s > compile_timeout_s:
            timed_out = (f"importing/compiling the candidate (its import and the first call of each size) took "
                         f"longer than {compile_timeout_s:.0f} s")
        elif now - t0 - compile_s > timeout_s:
            timed_out = f"deadline of {timeout_s:.0f} s passed"
        if timed_out:
            break
    return timed_out, compile_s, truncated


def _env(token: str, cuda_devices: list[int] | None, extensions_dir: str | None,
         allow_multicast: bool = False) -> dict:
    # the allocation's and this step's SLURM_* would make a rank look like a task of this step
    # (launch/slurm.py gives a step's srun back what names the allocation)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PYTEST_CURRENT_TEST",
              "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS"):
        env.pop(k, None)
    env.update({k: v for k, v in SAFE_ENV.items() if not (allow_multicast and k in MULTICAST_OFF)})
    env["KB_JOB_TOKEN"] = token
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = child_pythonpath(env)
    if cuda_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in cuda_devices)
    if extensions_dir:
        env["TORCH_EXTENSIONS_DIR"] = extensions_dir
        env["TRITON_CACHE_DIR"] = os.path.join(extensions_dir, "triton")
    return env


def rank_server(extensions_dir: str | None = None) -> RankServer:
    """A rank server whose zygote has the ranks' environment but no job's token or GPUs (each
    forked rank gets its job's, see _env)."""
    env = _env("", None, extensions_dir)
    env.pop("KB_JOB_TOKEN")
    return RankServer(env)


def remove_job_dir(job_dir: Path):
    shutil.rmtree(job_dir, ignore_errors=True)
