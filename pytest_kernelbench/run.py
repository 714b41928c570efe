"""The run as pytest sees it: one object per role, registered as plugins by plugin.py.

- `BenchRun` (every process, xdist workers included): the run's settings, id and nonce; the
  KBSession (machine facts, calibration, GPU pool), built the first time an item needs it, so a
  pytest run that collects no kernelbench item never touches the machine or the disk; collection
  checks (resume, option values no selected problem accepts); and one final record per item,
  attached to the item's teardown report (synthesized when the item ended without one: a
  fixture error, a pytest-timeout, a skip).
- `ReportWriter` (the controller only: the single process, or the xdist controller): one JSONL
  line per record as its report arrives, the JSON report at the end, the terminal summary.
"""
from __future__ import annotations

import json
import shlex
from collections.abc import Generator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from . import report
from .fixtures import KB_PROBLEM, RECORDS, RUN_PLUGIN  # noqa: F401 (RUN_PLUGIN re-exported)
from .options import Settings
from .pkb import checkout as pkb_checkout
from .pkb import pairing
from .protocol import Failure, Outcome
from .session import KBSession, base_record
from .spec import hardware

if TYPE_CHECKING:
    from _pytest.terminal import TerminalReporter

    from .launch.base import Launcher
    from .report.diff import Comparison
    from .report.record import ItemRecord
    from .spec.problem import Problem

FIRST_BAD = pytest.StashKey[dict]()

# settings that change what a record means: a resumed run must match the earlier run on each
IDENTITY = ("candidate", "solutions", "solutions_only", "model", "samples", "rounds", "temperature", "max_tokens", "device",
            "nproc", "cpu_ranks", "sizes", "trials", "timing", "timing_rounds", "seed", "allow_multicast",
            "pkb", "pkb_backend")


def is_kb_nodeid(nodeid: str) -> bool:
    path, _, rest = nodeid.partition("::")
    # a problem.yaml, or a ParallelKernelBench reference collected with --kb-pkb (pkb/<N>_<name>)
    return rest.startswith("test_problem[") and (path.endswith("problem.yaml") or rest.startswith("test_problem[pkb/"))


def identity(settings: Settings, rootdir: Path) -> dict:
    out = {k: getattr(settings, k) for k in IDENTITY}
    if out["solutions"]:
        out["solutions"] = str((rootdir / out["solutions"]).resolve())
    if out["pkb"]:       # which PKB, not where: the same checkout at two paths is one setting
        out["pkb"] = pkb_checkout.fingerprint(str(Path(out["pkb"]).resolve()))
    return json.loads(json.dumps(out))


def kb_home(config: pytest.Config, pkb: str | None) -> Path:
    """Where the run writes (reports, caches): pytest's rootdir, unless a path inside the --kb-pkb
    checkout given to collect moved it there; then the folder pytest was started in, so that
    nothing is written into the user's PKB clone."""
    root = Path(config.rootpath)
    if pkb and (root == Path(pkb) or Path(pkb) in root.parents):
        return Path(config.invocation_params.dir)
    return root


def pkb_facts(settings: Settings) -> dict | None:
    """What the report says about the PKB run: the checkout (commit, hashes, folder name) and, with
    --kb-solutions, how its files paired with the references (files that pair with none listed)."""
    if not settings.pkb:
        return None
    root = Path(settings.pkb)
    facts: dict = {"checkout": {"name": root.name, **pkb_checkout.fingerprint(str(root))},
                   "backend": settings.pkb_backend}
    if settings.solutions:
        stems = [p.stem for p in pkb_checkout.references(root)]
        facts["solutions"] = {"folder": Path(settings.solutions).name,
                              **pairing.pair(settings.solutions, settings.pkb_backend, stems).summary()}
    return facts


class BenchRun:
    def __init__(self, config: pytest.Config, settings: Settings, run_id: str, nonce: str,
                 launcher: Launcher | None = None) -> None:
        self.config = config
        self.launcher = launcher      # what starts the jobs' ranks (plugin.make_launcher)
        self.settings = settings
        self.run_id = run_id
        self.nonce = nonce
        self.rootdir = kb_home(config, settings.pkb)
        self.identity = identity(settings, self.rootdir)
        self.pkb = pkb_facts(settings)
        self._machine: dict | None = None
        self._session: KBSession | None = None
        path = Path(settings.report) if settings.report else Path("reports") / f"{run_id}.json"
        self.json_path = path if path.is_absolute() else self.rootdir / path
        self.jsonl_path = self.json_path.with_suffix(".jsonl")
        self.kb_items = 0

    # ---- built on first use ---------------------------------------------------------------------
    @property
    def machine(self) -> dict:
        if self._machine is None:
            from .launch import slurm_workers
            is_worker = hasattr(self.config, "workerinput")
            machine, probed = None, False
            from_node = not is_worker and slurm_workers.facts_from_a_node(self.settings.launcher,
                                                                          self.settings.slurm_workers)
            if from_node:       # the items run on compute nodes: their facts and ceilings, not this login node's
                got = slurm_workers.node_machine(str(self.rootdir), self.settings.calibrate)
                machine, probed = (None, False) if "error" in got else (got, True)
            if machine is None:
                machine = hardware.machine_info()
                if from_node:
                    machine["facts_from"] = {"node": None, "error": got["error"]}
            from .rank.sandbox import expected_layers
            machine["isolation"] = expected_layers()     # what each candidate process gets (records say what it got)
            from .contain import in_force
            machine["containment"] = in_force()            # how each job is kept together and ended
            machine["cluster"] = slurm_workers.cluster_layout()        # the Slurm allocation this run is inside, if any
            if not probed and machine.get("gpu_count") and self.settings.calibrate != "off":
                from .metrics import calibrate  # cached on disk under a file lock: measured once per machine
                measured = calibrate.calibrated(machine, force=self.settings.calibrate == "force" and not is_worker)
                machine["calibration"] = measured
                machine["ceilings"] = calibrate.ceilings(machine, measured)
            if probed and self.settings.launcher == "slurm" and self.settings.nodes > 1 and machine.get("gpu_count") \
                    and self.settings.calibrate != "off":
                from .metrics import calibrate  # items span nodes: the network's bandwidth, measured once per run
                machine.setdefault("calibration", {}).update(calibrate.inter_node("cuda", cwd=str(self.rootdir)))
                machine["ceilings"] = calibrate.ceilings(machine, machine["calibration"])
            self._machine = machine
        return self._machine

    @property
    def session(self) -> KBSession:
        if self._session is None:
            self._session = KBSession(self.settings, self.rootdir, self.run_id, self.nonce, self.machine,
                                      json_path=self.json_path, launcher=self.launcher)
        return self._session

    # ---- collection ---------------------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)   # after -k / -m deselection: `items` is what will run
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        kb = [i for i in items if is_kb_nodeid(i.nodeid)]
        self.kb_items = len(kb)
        if not kb:
            return
        if self.settings.resume:
            done = {r.get("nodeid") for r in resumed_records(self.settings.resume)[0]
                    if r.get("outcome") in (Outcome.PASSED, Outcome.FAILED)}   # skipped, API-error items run again
            dropped = [i for i in items if i.nodeid in done]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = [i for i in items if i.nodeid not in done]
            self.kb_items = sum(1 for i in items if is_kb_nodeid(i.nodeid))
        if not hasattr(config, "workerinput"):          # under xdist the controller checks (plugin.py)
            self.validate([i.stash[KB_PROBLEM] for i in kb if KB_PROBLEM in i.stash])
        if not config.pluginmanager.hasplugin("dsession") and not config.option.collectonly \
                and not self.settings.print_prompt:
            # items run in this process: the rank server imports torch while the first item gets ready
            try:
                self.session.warm_launcher()
            except Exception:   # noqa: BLE001 - the first item meets the same error and reports it
                pass

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._session is not None:
            self._session.close()

    def validate(self, problems: list):
        """Option values that no selected problem accepts are a usage error, not a run of skips."""
        s = self.settings
        if not problems:
            return
        if s.sizes:
            known = {n for p in problems for n in p.sizes}
            missing = [n for n in s.sizes if n not in known]
            if missing:
                raise pytest.UsageError(f"--kb-sizes: no selected problem has a size {missing[0]!r} "
                                        f"(sizes: {', '.join(sorted(known))})")
        if s.nproc is not None:
            valid = sorted({w for p in problems for w in p.world_sizes})
            if s.nproc not in valid:
                raise pytest.UsageError(f"--kb-nproc={s.nproc}: no selected problem runs at that world size "
                                        f"(valid: {', '.join(map(str, valid))})")
        if s.device == "cuda":
            found = hardware.cuda_device_count()
            if not found:
                raise pytest.UsageError("--kb-device=cuda: torch sees no CUDA GPU on this machine")

    # ---- one final record per item, on its teardown report -----------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        rep = yield
        if not is_kb_nodeid(item.nodeid):
            return rep
        if rep.when in ("setup", "call") and (rep.failed or rep.skipped) and FIRST_BAD not in item.stash:
            item.stash[FIRST_BAD] = _bad(rep)
        if rep.when == "teardown":
            records = item.stash.get(RECORDS, [])
            if not records:
                problem = item.stash.get(KB_PROBLEM, None)
                records = [synthesized(item.nodeid, item.stash.get(FIRST_BAD, None), problem)]
            # the JSON boundary: plain JSON types only (xdist ships the report to the controller)
            setattr(rep, "kb_records", json.loads(json.dumps([r.to_dict() for r in records], default=str)))  # noqa: B010 (pytest's reports take extra attributes; xdist ships them)
        return rep


class ReportWriter:
    """Controller side: the JSONL as records arrive, the JSON and the table at the end."""

    def __init__(self, run: BenchRun):
        self.run = run
        self.records: list[dict] = []
        self.logged: set[str] = set()
        self.log: report.JsonlLog | None = None
        self.first_bad: dict[str, dict] = {}
        self.doc: dict | None = None
        self.interrupted: dict | None = None
        self.comparison: Comparison | None = None      # --kb-compare: cli.compare.Comparison
        self.gate_misses: dict[str, list[str]] | None = None    # --kb-min-busbw / --kb-max-latency
        self.gate_lines: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = report.nodeid
        if not is_kb_nodeid(nodeid):
            return
        records = getattr(report, "kb_records", None)
        if records is None and report.when in ("setup", "call"):
            if (report.failed or report.skipped) and nodeid not in self.first_bad:
                self.first_bad[nodeid] = _bad(report)
            return
        if records is None:
            # no teardown report with records: the process running the item died (xdist crash)
            records = [synthesized(nodeid, self.first_bad.get(nodeid) or {**_bad(report), "crash": True})]
        if nodeid in self.logged:
            return
        self.logged.add(nodeid)
        for rec in records:
            rec.update(run_id=self.run.run_id, run_config=self.run.identity)
            self.records.append(rec)
            if self.log is None:
                self.log = report_log(self.run)
            self.log.append(rec)

    def pytest_keyboard_interrupt(self) -> None:
        from .launch import hold_interrupts
        hold_interrupts()      # the report is still to be written

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int | pytest.ExitCode) -> None:
        if not self.records and not (exitstatus == pytest.ExitCode.INTERRUPTED and self.run.kb_items):
            return      # a Ctrl-C before the first item ended still leaves a report that says so
        # this run's records as the controller received them, and an earlier run's signed lines
        # (--kb-resume): never what the file on disk says now
        earlier = resumed_records(self.run.settings.resume)[0] if self.run.settings.resume else []
        items = earlier + self.records
        args = list(session.config.invocation_params.args)
        config = {"run_id": self.run.run_id, "nonce": self.run.nonce, "settings": asdict(self.run.settings),
                  "identity": self.run.identity, "args": args}
        if self.run.pkb:
            config["pkb"] = self.run.pkb
        self.interrupted = self._interrupted(exitstatus, args)
        self.gate_misses = self._gate(items)
        self.doc = report.write_json(self.run.json_path, self.run.machine, config, items, self.interrupted)
        if self.gate_misses and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.run.settings.compare:
            from .report import diff as compare
            self.comparison = compare.against(self.run.settings.compare, {**self.doc, "path": str(self.run.json_path)},
                                              self.run.settings.compare_fail)
            self.comparison.per_size = self.comparison.per_size or bool(self.run.settings.per_size)
            if self.comparison.failed and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED   # as pytest-benchmark's --benchmark-compare-fail
        run_dir = self.run.json_path.with_suffix("")
        for d in (run_dir / "jobs", run_dir):     # every job passed and was removed: leave no empty folder
            try:
                d.rmdir()
            except OSError:
                pass

    def _gate(self, items: list[dict]) -> dict[str, list[str]] | None:
        """--kb-min-busbw / --kb-max-latency: each item's misses go into its record (`gates`); None
        when no gate was asked for."""
        s = self.run.settings
        if not (getattr(s, "min_busbw", None) or getattr(s, "max_latency", None)):
            return None
        from .metrics import gates
        wanted = gates.parse(s.min_busbw, "busbw") + gates.parse(s.max_latency, "latency")
        found = {}
        for rec in items:
            missed = gates.misses(rec, wanted)
            if missed:
                rec["gates"] = missed
                found[rec.get("nodeid") or "?"] = missed
        self.gate_lines = [g.describe() for g in wanted]
        return found

    def _interrupted(self, exitstatus: int | pytest.ExitCode, args: list[str]) -> dict | None:
        """Selected items that never finished (Ctrl-C, -x/--maxfail): how many, why, and the command
        that continues the run from its JSONL."""
        finished = {r.get("nodeid") for r in self.records}
        left = max(0, getattr(self.run, "kb_items", 0) - len(finished))
        if not left:
            return None
        reason = "interrupted (Ctrl-C)" if exitstatus == pytest.ExitCode.INTERRUPTED else \
            "stopped early (-x / --maxfail / a crash)"
        keep = [a for a in args if not a.startswith(("--kb-report", "--kb-resume"))]
        # nothing finished, so no JSONL to resume from: the same run again, into a new report
        resume = shlex.join(["pytest", *keep] + ([f"--kb-resume={self.run.jsonl_path}"] if finished or
                                                 self.run.settings.resume else []))
        return {"reason": reason, "left": left, "resume": resume}

    def pytest_terminal_summary(self, terminalreporter: TerminalReporter, exitstatus: pytest.ExitCode,
                                config: pytest.Config) -> None:
        tr = terminalreporter
        if self.run.settings.print_prompt and self.records:
            prompts = self.run.json_path.with_suffix("") / "prompts"
            n = len(list(prompts.glob("*.md"))) if prompts.is_dir() else 0
            tr.write_sep("=", "kernelbench")
            tr.write_line(f"prompts: {n} written to {prompts} (no model was called)")
            return
        if self.doc is None:
            return
        tr.write_sep("=", "kernelbench")
        if self.doc["items"]:
            for line in report.table(self.doc["items"]):
                tr.write_line(line)
            tr.write_line("")
            if self.run.settings.per_size:
                from .report import persize
                for line in persize.table(self.doc["items"]):
                    tr.write_line(line)
                tr.write_line("")
        for line in report.summary_lines(self.doc):
            tr.write_line(line)
        tr.write_line(f"report: {self.run.json_path}  (per-item log: {self.run.jsonl_path})")
        if self.doc.get("interrupted"):
            stop = self.doc["interrupted"]
            tr.write_line(f"INCOMPLETE: {stop['reason']}; {stop['left']} selected item(s) did not run. "
                          f"Continue with: {stop['resume']}", yellow=True, bold=True)
        if self.gate_misses is not None:
            tr.write_sep("-", "kernelbench gates")
            tr.write_line("gates: " + "; ".join(self.gate_lines) + " (passed GPU items; CPU times are no speed)")
            misses = [m for ms in self.gate_misses.values() for m in ms]
            tr.write_line(f"FAILED: {len(misses)} gate(s) missed: " + "; ".join(misses) if misses
                          else "every gated item within its bounds")
        if self.comparison is not None:
            tr.write_sep("-", "kernelbench compare")
            for line in self.comparison.lines():
                tr.write_line(line)


def report_log(run: BenchRun) -> report.JsonlLog:
    return report.JsonlLog(run.jsonl_path, report.report_key(run.run_id, create=True))


def resumed_records(jsonl: str) -> tuple[list[dict], int]:
    """The lines of an earlier run's JSONL that carry its HMAC (and how many were refused: torn,
    unsigned, or forged). Without the run's key nothing can be trusted: a usage error."""
    lines, refused, keyless = report.read_signed(Path(jsonl), report.report_key)
    if keyless and not lines:
        missing = ", ".join(str(report.key_path(r)) for r in sorted(keyless))
        raise pytest.UsageError(f"--kb-resume={jsonl}: its report key is missing ({missing}); a run "
                                "can be resumed only where it was started (the key signs its lines)")
    if refused:
        import warnings
        warnings.warn(f"--kb-resume={jsonl}: {refused} line(s) refused (torn, unsigned or not this run's): "
                      "their items run again", stacklevel=2)
    return lines, refused


def _bad(rep: pytest.TestReport) -> dict:
    """What a failed or skipped report says, for the record synthesized if the item leaves none."""
    text = _short(rep)
    # pytest-timeout's signal method fails the test with "Timeout >Ns"
    return {"when": rep.when, "skipped": rep.skipped, "text": text, "timeout": "Timeout >" in text}


def _short(rep: pytest.TestReport, lines: int = 12) -> str:
    """The message of a failed or skipped report, without pytest's decoration."""
    if rep.skipped and isinstance(rep.longrepr, tuple) and len(rep.longrepr) == 3:
        return str(rep.longrepr[2]).removeprefix("Skipped: ")
    text = getattr(rep, "longreprtext", "") or str(rep.longrepr or "")
    kept = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(kept[-lines:])


def synthesized(nodeid: str, bad: dict | None, problem: Problem | None = None) -> ItemRecord:
    """The record of an item that ended without one: skipped with its reason, or an error (an
    exception outside the candidate's job: a fixture, the harness, pytest-timeout, a dead worker)
    that still counts in every rate."""
    rec = base_record(problem, None, nodeid)
    bad = bad or {"when": "call", "skipped": False, "text": "the item ended without a result"}
    if bad.get("skipped"):
        rec.end(Outcome.SKIPPED, message=bad["text"])
    elif bad.get("invalid"):
        rec.end(Outcome.ERROR, Failure.INVALID_PROBLEM, bad["text"])
    elif bad.get("timeout"):
        rec.end(Outcome.FAILED, Failure.TIMEOUT, f"pytest-timeout fired: {bad['text']}")
    elif bad.get("crash"):
        rec.end(Outcome.ERROR, Failure.HARNESS_ERROR, f"the process running the item died: {bad['text']}")
    else:
        rec.end(Outcome.ERROR, Failure.HARNESS_ERROR, f"{bad['when']}: {bad['text']}")
    return rec
