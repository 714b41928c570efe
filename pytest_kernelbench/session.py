"""One benchmark run: its settings, ids and machine, and running one item end to end
(placement -> job -> launch -> record). Lives in every pytest process (controller and xdist
workers); only the controller writes reports."""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING


from . import launch, metrics
from .candidates import copies, safety
from .launch import registry, slurm_workers
from .launch.base import Launcher
from .launch.gpus import GpuPool
from .metrics import devnums, roofline
from .options import DEFAULT_TIMEOUT_S, Settings, per_item
from .outcome import LaunchOutcome, judge
from .pkb.checkout import is_pkb
from .protocol import SHARED_NO_SPEED, SHARED_PLACEMENT, Failure, JobLayout, JobSpec, Outcome, TimingSpec, rule_of
from .report.record import ItemRecord
from .spec import hardware
from .spec import baselines as baseline_rules
from .spec import shared as shared_rules
from .spec.problem import TINY, Placement, size_names

if TYPE_CHECKING:
    from .candidates import Candidate
    from .native import Prepared
    from .spec.problem import Problem

PKB_SHIM = str(Path(__file__).resolve().parent / "pkb" / "shim")     # PKB's `utils` helpers, our own


MULTI_NODE_PG_TIMEOUT_S = 60.0    # ranks on several nodes: first connections cross the network


class Skip(Exception):
    """The item cannot run here; str() is the reason."""


def new_run_id(label: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")[:40] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


class KBSession:
    def __init__(self, settings: Settings, rootdir: Path, run_id: str, nonce: str, machine: dict, json_path: Path,
                 launcher: Launcher | None = None):
        self.settings = settings
        self.rootdir = Path(rootdir)
        self.run_id = run_id
        self.nonce = nonce
        self.machine = machine if machine is not None else hardware.machine_info()
        self.gpu_count = hardware.cuda_device_count()
        self.json_path = Path(json_path)        # the run's report (run.BenchRun decides where)
        self.jsonl_path = self.json_path.with_suffix(".jsonl")
        self.run_dir = self.json_path.with_suffix("")       # prompts, candidates, job folders (made when needed)
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pytest-kernelbench"
        # machine-wide, so separate pytest sessions on one machine never share a GPU either
        visible = re.sub(r"[^A-Za-z0-9,-]", "", os.environ.get("CUDA_VISIBLE_DEVICES", "all")) or "all"
        if self.gpu_count:
            cache.mkdir(parents=True, exist_ok=True)
        self.pool = GpuPool(cache / f"gpu-leases-{visible}.json", list(range(self.gpu_count))) if self.gpu_count else None
        self.extensions_dir = os.environ.get("TORCH_EXTENSIONS_DIR") or str(cache / "torch_extensions")
        # native candidates' builds: per machine, shared by xdist workers and runs (native/build.py)
        self.native_dir = os.environ.get("KB_NATIVE_CACHE") or str(cache / "native")
        self.shapes_prefetched = False     # model runs probe every item's input shapes once, up front
        # what starts every job's ranks (--kb-launcher; plugin.py makes it, through the hook)
        made = launcher or registry.make(settings.launcher, settings)
        if made is None:
            raise ValueError(f"--kb-launcher={settings.launcher!r}: expected {registry.known()}")
        self.launcher: Launcher = made
        if not made.local_gpus and (self.machine.get("facts_from") or {}).get("node"):
            # Slurm gives each step its GPUs: placement counts a node's (probed there) per node spanned
            self.gpu_count = int(self.machine.get("gpu_count") or 0) * max(1, settings.nodes)

    def warm_launcher(self) -> None:
        """Start what the launcher keeps between jobs (the fork launcher's zygote) ahead of the first
        item, so its torch import overlaps with other work."""
        self.launcher.prepare()

    def close(self) -> None:
        self.launcher.close()

    # ---- where an item runs ----------------------------------------------------------------
    def prefetch_shapes(self, problems: Iterable[Problem | None]) -> None:
        """Probe the input shapes of every collected problem in one subprocess (once per session), so
        that each item's prompt finds them in the cache instead of starting its own probe."""
        if self.shapes_prefetched:
            return
        self.shapes_prefetched = True
        from .candidates.llm import cache_root
        from .spec import shapes
        requests, seen = [], set()
        for problem in problems:
            if problem is None:
                continue
            try:
                w = self.place(problem).world_size
            except Skip:
                continue
            if (problem.path, w) not in seen:
                seen.add((problem.path, w))
                requests.append((problem, w))
        if len(requests) > 1:
            shapes.probe_many(requests, cache_root(self.settings, self.rootdir) / "shapes")

    def place(self, problem: Problem) -> Placement:
        s = self.settings
        if s.device == "cuda" or (s.device == "auto" and self.gpu_count and "cuda" in problem.devices):
            device = "cuda"
        elif s.device in ("cpu", "auto") and "cpu" in problem.devices:
            device = "cpu"
        elif "cpu" not in problem.devices:
            note = f" ({problem.cpu_note.strip()})" if problem.cpu_note else ""
            raise Skip(f"needs CUDA GPUs, found {self.gpu_count}{note}")
        else:
            raise Skip(f"runs on {', '.join(problem.devices)}, not {s.device}")
        if device == "cuda" and "cuda" not in problem.devices:
            raise Skip("this problem does not run on CUDA")
        if problem.nodes > s.nodes:
            raise Skip(f"needs --kb-nodes >= {problem.nodes} (ranks on {'two' if problem.nodes == 2 else problem.nodes} "
                       "or more nodes)")
        limit = self.gpu_count if device == "cuda" else s.cpu_ranks
        valid = problem.world_sizes
        if s.nodes > 1:        # every node gets the same number of ranks (launch/slurm.py)
            valid = tuple(w for w in valid if w % s.nodes == 0)
            if not valid:
                raise Skip(f"no world size splits evenly over --kb-nodes={s.nodes} "
                           f"(world sizes: {', '.join(map(str, problem.world_sizes))})")
        # --kb-oversubscribe: a CUDA world size that does not fit runs on the GPUs there are, shared
        share = device == "cuda" and bool(s.oversubscribe) and self.gpu_count > 0
        hint = " (--kb-oversubscribe checks it on fewer GPUs: correctness only)" if device == "cuda" and self.gpu_count else ""
        if s.nproc is not None:
            if s.nproc not in valid:
                raise Skip(f"world size {s.nproc} is not valid here (valid: {', '.join(map(str, valid))}"
                           f"{f' over --kb-nodes={s.nodes}' if s.nodes > 1 else ''})")
            if device == "cuda" and s.nproc > self.gpu_count and not share:
                raise Skip(f"needs {s.nproc} CUDA GPUs, found {self.gpu_count}{hint}")
            world = s.nproc
        else:
            fitting = [w for w in valid if w <= limit]
            if not fitting and not share:
                what = "CUDA GPUs" if device == "cuda" else "CPU ranks (--kb-cpu-ranks)"
                raise Skip(f"needs {min(valid)} {what}, found {limit}{hint}")
            world = max(fitting) if fitting else min(valid)
        shared = device == "cuda" and world > self.gpu_count
        if shared:
            self.shared_skip(problem)
        if s.sweep:
            return self._swept(problem, device, world, shared)
        sizes = size_names(problem, device, s.sizes)
        if not sizes:
            raise Skip(f"none of the sizes {s.sizes} exists (sizes: {', '.join(problem.sizes)})")
        return Placement(device, world, sizes, shared=shared)

    def shared_skip(self, problem: Problem) -> None:
        """Raise Skip where an item cannot run with its ranks sharing GPUs: a launcher whose scheduler
        gives each rank a GPU of its own, or a problem that says it needs what sharing cannot give."""
        if not self.launcher.local_gpus:
            raise Skip(f"--kb-oversubscribe shares this machine's GPUs; the {self.launcher.name} launcher's "
                       "scheduler gives each rank its own")
        why = shared_rules.problem_skip(problem.shared_device)
        if why:
            raise Skip(why)

    def _swept(self, problem: Problem, device: str, world: int, shared: bool = False) -> Placement:
        """--kb-sweep: the sweep's sizes, after the named sizes --kb-sizes asks for (if any)."""
        from .spec.bandwidth import parse_sweep, sweep_configs
        if problem.scale is None:
            raise Skip("--kb-sweep: this problem declares no size field that scales (problem.yaml scale)")
        base = {k: v for k, v in problem.sizes[TINY].items() if k != problem.scale.field}
        swept = sweep_configs(problem.scale, base, world, parse_sweep(self.settings.sweep))
        if not swept:
            raise Skip(f"--kb-sweep={self.settings.sweep}: no size of the sweep within the problem's bounds "
                       f"(scale.max {problem.scale.max})")
        named = [n for n in size_names(problem, device, self.settings.sizes) if n not in swept] \
            if self.settings.sizes else []
        return Placement(device, world, named + list(swept), swept, shared=shared)

    @staticmethod
    def cpu_candidate_skip(problem: Problem, placement: Placement, is_reference: bool) -> str | None:
        """Why a non-reference candidate cannot run this item on CPU, if it cannot."""
        if placement.device == "cpu" and problem.no_cpu_candidate and not is_reference:
            return f"no legal candidate on CPU: {problem.no_cpu_candidate}"
        return None

    # ---- one item ---------------------------------------------------------------------------
    def job(self, problem: Problem, candidate: Candidate, placement: Placement, job_dir: Path,
            native: Prepared | None = None, builds: Path | None = None) -> JobSpec:
        """The job's spec, and its candidate/ folder: all the candidate process may read of the job
        (its source; a native problem's built library, the source that was built, and the glue)."""
        s = self.settings
        folder = JobLayout(job_dir).candidate
        folder.mkdir(parents=True, exist_ok=True)
        source = native.source if native else candidate.source
        if source is None or (native and native.lib is None):     # run_item ends such items before
            raise ValueError(f"{problem.id}: nothing to run (no candidate source or no built library)")
        cand_path = folder / (problem.template_path.name if native else "solution.py")
        cand_path.write_text(source)
        lib = glue = None
        if native and native.lib:
            lib = folder / Path(native.lib).name
            shutil.copyfile(native.lib, lib)
            glue = folder / "glue.py"
            shutil.copyfile(problem.path / "glue.py", glue)
        return JobSpec(
            token=secrets.token_hex(8), problem=problem.id,
            harness_path=str(problem.harness_path), reference_path=str(problem.reference_path),
            candidate_path=str(cand_path), problem_dir=str(problem.path),
            protected=[str(problem.root), *map(str, problem.protected)],
            device=placement.device, dtype=problem.dtype,
            sizes={n: placement.config(problem, n) for n in placement.sizes}, size_order=list(placement.sizes),
            trials=s.trials, forbid=[] if candidate.is_reference else list(problem.forbid),   # on CPU as on CUDA
            inplace=problem.inplace, tolerance=dict(problem.tolerance),
            # ranks sharing a GPU: never timed (their kernels contend for one device; docs/one-gpu.md)
            timing=TimingSpec.for_device(placement.device, enabled=s.timing and not placement.shared,
                                         rounds=s.timing_rounds),
            pg_timeout_s=s.pg_timeout if s.nodes == 1 else max(s.pg_timeout, MULTI_NODE_PG_TIMEOUT_S),
            compile_timeout_s=s.compile_timeout, allow_multicast=bool(s.allow_multicast),
            native_lib=str(lib) if lib else None, glue_path=str(glue) if glue else None,
            sys_path=[PKB_SHIM] if is_pkb(problem) else [],
            builds=[str(builds), str(builds / "triton")] if builds else [], nodes=s.nodes,
            shared_gpus=self.gpus_for(placement) if placement.shared else 0,
            baselines=self.baselines_of(problem, placement)[0])

    def baselines_of(self, problem: Problem, placement: Placement) -> tuple[dict, dict]:
        """The baselines this item times ({name: file}) and those it leaves out ({name: why}):
        --kb-baselines, the device, and timing on (spec/baselines.py)."""
        timed = bool(self.settings.timing) and not placement.shared
        return baseline_rules.select(problem.baselines, self.settings.baselines, placement.device, timed)

    def gpus_for(self, placement: Placement) -> int:
        """How many GPUs an item leases: one per rank, or on a shared placement every GPU there is
        (up to W; its ranks spread over them, JobSpec.gpu_of)."""
        return min(placement.world_size, self.gpu_count) if placement.shared else placement.world_size

    def run_item(self, problem: Problem, candidate: Candidate, placement: Placement, nodeid: str,
                 sample: int | None = None) -> ItemRecord:
        record = base_record(problem, candidate, nodeid, sample)
        record.device, record.world_size = placement.device, placement.world_size
        if placement.shared:
            record.placement = SHARED_PLACEMENT
        record.host, record.slurm_step = slurm_workers.where()       # the node and Slurm step of this worker
        if candidate.failure or candidate.source is None:
            category, message = candidate.failure or (Failure.NO_CODE, f"{candidate.label}: no code")
            record.end(Outcome.FAILED, category, message)
            return record
        kind = problem.kind_spec
        if not candidate.is_reference and kind.copies_detectable and \
                copies.is_reference_copy(candidate.source, problem.reference_path.read_text()):
            record.end(Outcome.FAILED, Failure.REFERENCE_COPY, copies.MESSAGE)
            return record
        if not self.settings.allow_multicast and not candidate.is_reference:
            # refused before launch: it never runs here (a native candidate is C/C++/CUDA)
            found = safety.scan(candidate.source, kind.language)
            if found:
                record.end(Outcome.FAILED, Failure.UNSAFE, found)
                return record
        why = shared_rules.candidate_skip(candidate.source) if placement.shared else None
        if why:         # before launch, and never the candidate's failure: it cannot run here
            record.end(Outcome.SKIPPED, message=why)
            return record
        record.metric = problem.metric
        native = None
        if kind.built and not candidate.is_reference:
            native = self.prepare_native(problem, candidate.source, record)
            if native is None:
                return record
        slug = re.sub(r"[^A-Za-z0-9]+", "-", problem.id) + (f"-s{sample}" if sample is not None else "")
        job_dir = self.run_dir / "jobs" / f"{slug}-{secrets.token_hex(3)}"
        job_dir.mkdir(parents=True)
        timeout = per_item(self.settings.timeout, problem.timeout_s, DEFAULT_TIMEOUT_S)
        try:
            with build_folder(Path(self.extensions_dir), candidate.source or "") as builds:
                job = self.job(problem, candidate, placement, job_dir, native, builds)
                kwargs = dict(nonce=self.nonce, nproc=placement.world_size, timeout_s=timeout, launcher=self.launcher,
                              compile_timeout_s=self.settings.compile_timeout, extensions_dir=str(builds))
                if placement.device == "cuda" and self.launcher.local_gpus:    # else its scheduler gives the GPUs
                    with self.gpu_pool().lease(self.gpus_for(placement), nodeid, exclusive=self.settings.exclusive) as lease:
                        facts = launch.run_job(job_dir, job, cuda_devices=lease["gpus"], **kwargs)
                    record.gpus, record.concurrent_with = lease["gpus"], lease["concurrent_with"]
                else:
                    facts = launch.run_job(job_dir, job, **kwargs)
        except KeyboardInterrupt:
            # an interrupted item has no result: nothing points at its folder (it runs again on --kb-resume)
            launch.hold_interrupts()
            launch.remove_job_dir(job_dir)
            raise
        if facts.exits is not None and facts.exits.step is not None:    # a Slurm step: its id, each rank's node
            record.slurm_step = facts.exits.step
            record.hosts = [facts.exits.hosts.get(r) for r in range(placement.world_size)]
        self.fill(record, judge(facts), placement)
        if native is None and candidate.origin:     # a native job's file is spliced: its lines are not the user's
            own_path(record, job.candidate_path, candidate.origin)
        metrics.annotate_metric(record.sizes, problem.metric)
        devnums.annotate(record.sizes, problem.busbw, problem.scale, placement.world_size)
        for size in record.sizes:
            if size.get("name") in placement.swept:
                size["sweep"] = True
        if problem.busbw:
            record.busbw = problem.busbw
        if problem.baselines:       # what was timed beside the reference, and why the others were not
            record.baselines = baseline_rules.item_record(problem.baselines, problem.reference_label,
                                                          *self.baselines_of(problem, placement), placement.device)
        record.job_dir = str(job_dir)
        if record.outcome == Outcome.PASSED and not self.settings.keep_jobs:
            launch.remove_job_dir(job_dir)
            record.job_dir = None
        return record

    def gpu_pool(self) -> GpuPool:
        if self.pool is None:
            raise RuntimeError("a CUDA item, but this machine has no GPU to lease")
        return self.pool

    def prepare_native(self, problem: Problem, source: str, record: ItemRecord) -> Prepared | None:
        """Splice, scan and build a native candidate before launch (the build is not on the item's
        deadline: its time goes to record["build"]). None when the item ends here (record filled)."""
        from .native import prepare
        prep = prepare(problem, source, Path(self.native_dir), self.settings.compile_timeout)
        record.build = prep.build or None
        if prep.error:
            record.end(Outcome.ERROR, Failure.HARNESS_ERROR, prep.error)
        elif prep.failure:
            record.end(Outcome.FAILED, *prep.failure)
        else:
            return prep
        return None

    def fill(self, record: ItemRecord, outcome: LaunchOutcome, placement: Placement) -> None:
        result = outcome.result or {}
        sizes = result.get("sizes") or []
        record.outcome, record.failure, record.message = outcome.status, outcome.category, outcome.message
        record.wall_s, record.compile_s, record.sizes = outcome.wall_s, outcome.compile_s, sizes
        record.phases_s = result.get("phases_s")
        record.warnings = (result.get("warnings") or []) + outcome.warnings
        record.isolation = result.get("isolation")
        record.cores = result.get("cores")
        record.killed_strays, record.log_tail = outcome.killed, outcome.log_tail or None
        record.rank_phases = outcome.rank_phases if outcome.category == Failure.TIMEOUT else None
        if rule_of(outcome.message) and outcome.status == Outcome.FAILED:
            record.rule = rule_of(outcome.message)
        # ranks sharing a GPU ran untimed: no roofline, no band, no score (docs/one-gpu.md)
        ceilings = self.machine.get("ceilings") if placement.device == "cuda" and not placement.shared else {}
        roof = roofline.annotate(sizes, ceilings or {})
        record.roofline, record.suspect = roof["roofline"], roof["suspect"]
        if placement.device != "cuda" or placement.shared:
            # gloo on a CPU: the times exercise the protocol; a ratio of them is not a speed (ranks
            # sharing a GPU are not timed at all: nothing to move, but never a speedup either way)
            for s in sizes:
                if s.get("speedup") is not None:
                    s["cpu_time_ratio"], s["speedup"], s["band"] = s["speedup"], None, None
                    s.pop("speedup_of_medians", None)
            record.speed = SHARED_NO_SPEED if placement.shared else "cpu: not a speed"
        else:
            band = metrics.item_band(sizes)
            record.band = list(band) if band else None
        if outcome.status == Outcome.PASSED:
            record.score = metrics.item_score(sizes)
            # a CPU item has no band key: verdict() sees None, as record.get("band") gave
            record.verdict = metrics.verdict(record.score, record.band)
        timed = sum(metrics.timed_seconds(s) for s in sizes)
        record.timed_s = timed
        record.overhead_s = max(0.0, outcome.wall_s - timed)


def own_path(record: ItemRecord, job_copy: str, origin: str) -> None:
    """Failure text names the candidate's own file, the one to edit, not the job folder's copy of
    it (the same text, line for line)."""
    for attr in ("message", "log_tail"):
        text = getattr(record, attr)
        if text and job_copy in text:
            setattr(record, attr, text.replace(job_copy, origin))


@contextmanager
def build_folder(root: Path, source: str) -> Iterator[Path]:
    """The candidate's own build folder (torch extensions, Triton cache), keyed by its source: a
    cached build is reused only for the same source, and builds of different candidates never
    share a folder or a lock. Held under a file lock for the job (released if this process dies),
    so a torch build `lock` file found there was left by a job that was killed mid-build: it is
    removed instead of making this job wait out the compile budget."""
    folder = root / hashlib.sha256(source.encode()).hexdigest()[:16]
    (folder / "triton").mkdir(parents=True, exist_ok=True)
    from filelock import FileLock  # here, not at import: the plugin loads without its runtime packages
    with FileLock(str(folder) + ".lock"):
        for stale in folder.glob("*/lock"):
            stale.unlink(missing_ok=True)
        yield folder


def base_record(problem: Problem | None, candidate: Candidate | None, nodeid: str, sample: int | None = None) -> ItemRecord:
    """The one builder of an item record (its identity). Without a loaded problem (a problem.yaml
    that does not load, a worker that died) the id comes from the node id and the rest stays empty."""
    if problem is None:
        pid = nodeid.partition("::test_problem[")[2].rstrip("]")
        return ItemRecord(nodeid, pid, category=pid.split("/")[0], sample=sample)
    rec = ItemRecord(nodeid, problem.id, title=problem.title, category=problem.category,
                     parallelism=list(problem.parallelism), difficulty=problem.difficulty,
                     libraries=list(problem.libraries), sample=sample,
                     candidate=candidate.record() if candidate else None)
    rec.family, rec.unscored = problem.family, problem.unscored     # metrics: family weights, speed aggregates
    return rec
