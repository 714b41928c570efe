"""Run one job's ranks with a deadline, and leave no process behind; return what happened
(`LaunchFacts`), for outcome/ to judge.

A launcher (base.Launcher: fork.py, the rank server, by default; torchrun.py; one a plugin gives
through the pytest_kb_make_launcher hook) starts the ranks; everything around it is here, alike
for every launcher. Every rank runs in its own session, so killing one process group alone orphans
the ranks. Every process a job starts carries KB_JOB_TOKEN in its environment (a forked rank is
known by its pid); on the way out we kill, by pid, every process that has the token, belongs to a
session we saw in the job's tree, or descends from one of those, and check again until none is left.
The launching process is a child subreaper (Linux), so a daemon that double-forks, calls setsid and
drops its environment is re-parented to us instead of init, and is found as our own child started
during the job.

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
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..contain import JOB_CGROUP_ENV, JobCgroup, job_cgroup, members
from ..procs import Activity, ProcessHunter, alive, become_subreaper, mark
from ..protocol import ExitFacts, JobLayout, JobSpec
from .base import Launcher, LaunchError, Ranks
from .env import SAFE_ENV, job_env
from .jobs import read_phases, setup_phase
from .keyservice import KeyService
from .stall import Stall

if TYPE_CHECKING:
    from .fork import RankServer

__all__ = ["SAFE_ENV", "LaunchError", "LaunchFacts", "Launcher", "Ranks", "cap_logs", "rank_server",
           "remove_job_dir", "restore_tree", "run_job", "snapshot_tree"]

LOG_LIMIT_BYTES = int(os.environ.get("KB_LOG_LIMIT_BYTES") or 8 << 20)   # per rank log
_env = job_env     # the name tests and older callers use


@dataclass
class LaunchFacts:
    """What launching one job did, before anyone judges it (outcome.judge reads the job folder with
    these)."""
    job_dir: Path
    nproc: int
    token: str
    key: str                       # the job's one-time key: a done mark signed with it is trusted
    candidate_path: str | None
    launcher: str
    error: str | None = None       # the ranks could not be started (why)
    timed_out: str | None = None   # the deadline or the compile budget passed (which, in words)
    returncode: int | None = None  # the job's status (None: never started)
    wall_s: float = 0.0
    compile_s: float = 0.0
    phases: dict[int, str] = field(default_factory=dict)   # each rank's phase when the job ended
    killed: list[int] = field(default_factory=list)        # stray processes killed after the job
    truncated: list[str] = field(default_factory=list)     # logs cut at LOG_LIMIT_BYTES
    log_limit: int = LOG_LIMIT_BYTES
    tree_changed: list[str] = field(default_factory=list)  # protected files the job changed (undone)
    quarantine: Path | None = None                         # where those changes were kept
    exits: ExitFacts | None = None                         # how the ranks ended, as the launcher wrote it


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
    for log in JobLayout(job_dir).logs.glob("*.log"):
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


def run_job(job_dir: Path, job: JobSpec, nonce: str, nproc: int, timeout_s: float, *, launcher: Launcher,
            compile_timeout_s: float = 600.0, cuda_devices: list[int] | None = None,
            extensions_dir: str | None = None) -> LaunchFacts:
    """Write job.json, start the ranks with `launcher`, wait under the deadline, kill what is left,
    check the protected trees. What happened comes back as facts; outcome.judge says what it means."""
    job_dir = Path(job_dir)
    layout = JobLayout(job_dir)
    layout.logs.mkdir(parents=True, exist_ok=True)
    cwd = layout.cwd
    cwd.mkdir(exist_ok=True)
    key = secrets.token_hex(32)
    job.write(layout.job)
    facts = LaunchFacts(job_dir=job_dir, nproc=nproc, token=job.token, key=key, candidate_path=job.candidate_path,
                        launcher=launcher.name)
    protected = job.protected
    tree_before = snapshot_tree(protected)
    become_subreaper()
    env = job_env(job.token, cuda_devices, extensions_dir, allow_multicast=job.allow_multicast,
                  shared=bool(job.shared_gpus))
    # the job's own cgroup (contain.py): its launcher puts the ranks in as they are forked; None
    # where cgroups cannot be used (the hunter's scans alone then)
    cgroup = job_cgroup(f"job-{job.token}")
    if cgroup is not None:
        env[JOB_CGROUP_ENV] = str(cgroup)
    # torchrun's torchelastic_* folder and the ranks' temporary files stay inside the job folder
    # and go with it, instead of piling up in /tmp
    (job_dir / "tmp").mkdir(exist_ok=True)
    env["TMPDIR"] = str(job_dir / "tmp")
    t0 = time.monotonic()
    mark("launch: start")
    ranks: Ranks | None = None

    def is_checker(pid: int) -> bool:     # who may have the key: a checker this launcher started
        return ranks is not None and ranks.is_checker(pid)
    keys = KeyService(JobLayout.control(job.token), key, nonce, is_checker)
    try:
        try:
            ranks = launcher.start(job_dir, nproc, env, cwd)
        except LaunchError as e:
            facts.error, facts.wall_s = f"could not start the ranks: {e}", time.monotonic() - t0
            return facts
        mark("launch: ranks started")
        ranks.hand_over({"key": key, "nonce": nonce})     # where checkers cannot reach the key service
        roots = ranks.roots()
        if cgroup is not None and not _contained(cgroup, roots, ranks.agent):
            cgroup.kill()       # the job runs outside it (a Slurm step, a refused move): the scans alone
            cgroup = None
        hunter = ProcessHunter(roots[0] if ranks.agent else roots, job.token, ignore=ranks.spared() or None)
        try:
            facts.timed_out, facts.compile_s, truncated = _wait(ranks, hunter, job_dir, t0, timeout_s,
                                                                compile_timeout_s, job.builds, job.pg_timeout_s)
        except BaseException as e:
            # pytest-timeout's outer net, Ctrl-C, ...: never leave the job running behind us
            if isinstance(e, KeyboardInterrupt):
                hold_interrupts()
            ranks.terminate()
            if cgroup is not None:
                cgroup.kill()
            hunter.kill_all(terminate_root=False)
            raise
    finally:
        keys.close()
        if ranks is None and cgroup is not None:
            cgroup.kill()
    facts.wall_s = time.monotonic() - t0
    mark("launch: ranks exited")
    facts.phases = read_phases(job_dir)
    if facts.timed_out:
        ranks.terminate()       # SIGTERM wherever the ranks run (once: their stacks go to their logs)
        facts.killed = hunter.kill_all(terminate_root=False)
        ranks.wait(timeout=10)
    elif cgroup is None:
        facts.killed = hunter.kill_all(grace_s=0.0, terminate_root=False)   # strays a candidate left (children, daemons)
    if cgroup is not None:
        # the whole job at once, whatever it forks meanwhile; the hunter then looks for what a
        # launcher ran outside the cgroup (a Slurm step's local processes), or an orphan of ours
        facts.killed = sorted(set(facts.killed) | set(cgroup.kill()) | set(hunter.kill_all(grace_s=0.0, terminate_root=False)))
    facts.killed += ranks.finish()
    if getattr(ranks, "ended_early", False):      # optional in base.Ranks
        # the job's own processes, killed because the launcher did not wait out their exits, are no strays
        trusted, candidates = _job_pids(layout, nproc)
        own = set(ranks.roots()) | trusted | set(candidates.values())
        facts.killed = [p for p in facts.killed if p not in own]
    mark("launch: strays killed")
    facts.returncode = ranks.returncode
    ranks.write_exits()
    facts.exits = ExitFacts.read(layout.exits)
    _cleanup(layout)
    facts.truncated = sorted(truncated)
    facts.quarantine = job_dir / "quarantine"
    facts.tree_changed = _restore_trees(protected, tree_before, facts.quarantine)
    mark("launch: end")
    return facts


def _contained(cgroup: JobCgroup, roots: list[int], agent: bool) -> bool:
    """Whether the job's first processes are in its cgroup. A launcher that did not put its ranks
    in as they were forked (a plugin's) has them moved in now, late but inside; an agent that is
    outside (srun) stays there, its job contained by the scans."""
    inside = set(members(cgroup.path))
    for pid in roots:
        if pid not in inside and alive(pid) and (agent or not cgroup.add(pid)):
            return False
    return True


def _cleanup(layout: JobLayout) -> None:
    """What a finished job leaves only for people: logs, the candidate, the result. Temporary and
    scratch folders go (a build cache lives apart, keyed by the candidate's source)."""
    shutil.rmtree(layout.tmp, ignore_errors=True)
    shutil.rmtree(layout.dir / "scratch", ignore_errors=True)
    for role in ("candidate", "reference"):      # this host's (another node's goes with its /tmp)
        shutil.rmtree(layout.solver_tmp(role), ignore_errors=True)


def _restore_trees(protected: list[str], before: dict, quarantine: Path) -> list[str]:
    """A job must leave every protected tree (the problem tree, a PKB checkout) as it found it. Any
    change is undone (it fails the item, outcome.judge); what changed is kept in `quarantine`. (A
    person's edit during a run is undone too: a benchmark's problems do not change under it.)"""
    changed = []
    for root in protected:
        changed += restore_tree(Path(root), {p: b for p, b in before.items() if Path(p).is_relative_to(root)},
                                quarantine / Path(root).name)
    return changed


ACTIVITY_EVERY_S = 0.5
# a setup phase counts as compiling while activity was seen this recently (a compile has pauses:
# ninja between two compiler runs, a rank loading what was built)
ACTIVITY_HOLD_S = 3.0


def _job_pids(layout: JobLayout, nproc: int) -> tuple[set[int], dict[int, int]]:
    """(trusted pids: checkers, their reference processes and helpers, rank -> candidate pid), as
    each checker wrote them (hb/pids<R>: checker, candidate, reference, helpers...)."""
    checkers, candidates = set(), {}
    for r in range(nproc):
        try:
            checker, candidate, *others = (int(x) for x in layout.pids(r).read_text().split())
        except (OSError, ValueError):
            continue
        checkers.add(checker)
        checkers.update(p for p in others if p > 0)
        candidates[r] = candidate
    return checkers, candidates


# how long a scheduler may take to start a job's ranks (at least the deadline): a Slurm step waits
# for the allocation's CPUs while the step before it completes
QUEUE_LIMIT_S = 300.0


def _wait(ranks: Ranks, hunter: ProcessHunter, job_dir: Path, t0: float, timeout_s: float,
          compile_timeout_s: float, watch_dirs: list[str], hang_s: float | None = None
          ) -> tuple[str | None, float, set[str]]:
    """Wait for the job under its deadline. Setup phases (importing the candidate, the first call of
    each size) are on the compile budget instead, but only while the job shows compile activity
    (procs.Activity): a rank that hangs in its first call while its peers wait meets the deadline,
    not the compile budget; and a first call in which nothing of the job runs for `hang_s` (the
    process-group timeout) is a hang at once (stall.py). Neither is the time a scheduler takes to
    start the ranks (Ranks.queued)."""
    compile_s, queue_s, last, last_scan, truncated = 0.0, 0.0, t0, 0.0, set()
    layout = JobLayout(job_dir)
    activity, last_sample, active_at = Activity(watch_dirs + [str(layout.dir / "scratch")]), 0.0, -1e9
    agent = set(ranks.roots()) if ranks.agent else set()
    timed_out = None
    idle = getattr(ranks, "idle", None) or time.sleep     # optional in base.Ranks
    queued = getattr(ranks, "queued", None) or (lambda: False)
    finishing = False
    stall = Stall(hang_s, ranks.nproc) if hang_s else None
    while ranks.poll() is None:
        idle(0.005 if finishing else 0.05)      # the last phase: its end is looked for closely
        now = time.monotonic()
        phases = read_phases(job_dir)
        finishing = len(phases) == ranks.nproc and all(p == "finish" for p in phases.values())
        setup = any(setup_phase(p) for p in phases.values())
        if setup and now - last_sample >= ACTIVITY_EVERY_S:
            checkers, candidates = _job_pids(layout, ranks.nproc)
            importing = {pid for r, pid in candidates.items() if phases.get(r) == "import candidate"}
            job_pids = hunter.scan()
            active = activity.sample(job_pids - agent - checkers, set(candidates.values()), importing)
            if active:
                active_at = now
            if stall:
                stall.sample(now, phases, candidates, job_pids, active)
            last_sample = now
        elif stall and not setup:
            stall.reset(now)
        if queued():
            if stall:
                stall.reset(now)
            queue_s += now - last    # nor does a scheduler that has not started the ranks yet
        elif setup and now - active_at <= ACTIVITY_HOLD_S:
            compile_s += now - last  # compiling a CUDA candidate does not eat the run's deadline
        last = now
        if now - last_scan > 1.0:
            hunter.scan()
            truncated.update(cap_logs(job_dir, LOG_LIMIT_BYTES))
            last_scan = now
        if compile_s > compile_timeout_s:
            timed_out = (f"importing/compiling the candidate (its import and the first call of each size) took "
                         f"longer than {compile_timeout_s:.0f} s")
        elif queue_s > max(timeout_s, QUEUE_LIMIT_S):
            timed_out = (f"the scheduler did not start the ranks within {max(timeout_s, QUEUE_LIMIT_S):.0f} s (the "
                         "allocation's nodes stayed busy: see logs/srun.log)")
        elif now - t0 - compile_s - queue_s > timeout_s:
            timed_out = f"deadline of {timeout_s:.0f} s passed"
        elif stall and stall.stalled(now):
            timed_out = stall.reason()
        if timed_out:
            break
    return timed_out, compile_s, truncated


def rank_server(extensions_dir: str | None = None) -> RankServer:
    """The fork launcher's rank server on its own (tests start one to probe the zygote)."""
    from .fork import rank_server as make
    return make(extensions_dir)


def hold_interrupts() -> None:
    """After the first Ctrl-C the run cleans up (the job's ranks, its folder, the report); a second
    one would cut that short, leave ranks running and print a traceback from inside pytest. From now
    on Ctrl-C gets a one-line note instead (main thread only: signal handlers live there)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def note(signum: int, frame: object) -> None:
        os.write(2, b"\nkernelbench: still cleaning up after Ctrl-C (stopping the ranks, writing the report)\n")
    signal.signal(signal.SIGINT, note)


def remove_job_dir(job_dir: Path) -> None:
    shutil.rmtree(job_dir, ignore_errors=True)
