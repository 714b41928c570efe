"""One candidate's code for one problem, scored without pytest: the same KBSession.run_item a
pytest item calls (placement -> job -> launch -> checker and candidate process -> record), the
feedback text the refinement rounds show a model, and the record's reward components.

`Evaluator` holds one KBSession (its fork launcher's rank server stays warm between evaluations);
each evaluation gets its own Settings (options below), nonce and node id. Not thread-safe: one
evaluation at a time per Evaluator (the batch form, pool.py, gives each worker process its own).
"""
from __future__ import annotations

import dataclasses
import os
import re
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import options as kb_options
from ..candidates import Candidate
from ..candidates.files import python_syntax
from ..pkb import static
from ..pkb.checkout import is_pkb
from ..protocol import Disposition, Failure, Outcome, disposition_of
from ..report.record import ItemRecord
from ..session import KBSession, Skip, base_record
from ..spec.problem import ProblemError

if TYPE_CHECKING:
    from ..spec.problem import Problem

# evaluate()'s options: these --kb-* options by their field name (world_size for nproc too),
# each checked by its own row (options.value_of); never allow-multicast, launcher, report, ...
# (oversubscribe: W ranks sharing fewer GPUs, a correctness signal at a fraction of the GPUs, never timed)
API_OPTIONS = ("nproc sizes trials timing timing-rounds seed timeout device compile-timeout pg-timeout cpu-ranks "
               "oversubscribe").split()
OPTION_NAMES = {"world_size": "nproc", **{kb_options.BY_NAME[n].field: n for n in API_OPTIONS}}
# options of the evaluation itself, not of the item's run
OWN_OPTIONS = ("deadline", "reward", "keep_job")


class EvaluateError(ValueError):
    """A request that cannot be evaluated as asked (unknown problem, bad option); str() is one line."""


class UnknownProblem(EvaluateError):
    pass


def default_problems_dir() -> Path:
    """$KB_PROBLEMS, else ./problems, else the problems/ of the checkout this package sits in."""
    env = os.environ.get("KB_PROBLEMS")
    if env:
        return Path(env)
    here = Path.cwd() / "problems"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parent.parent.parent / "problems"


def settings_for(options: dict[str, Any]) -> tuple[kb_options.Settings, dict[str, Any]]:
    """The run's Settings for one evaluation and its own options (deadline, reward). Unknown names
    and bad values are an EvaluateError naming the option."""
    own = {k: options[k] for k in OWN_OPTIONS if options.get(k) is not None}
    values = {o.name: o.default for o in kb_options.OPTIONS}
    values["calibrate"] = "off"          # the roofline reads a cached calibration when one exists
    for key, raw in options.items():
        if key in OWN_OPTIONS or raw is None:
            continue
        name = OPTION_NAMES.get(key)
        if name is None:
            raise EvaluateError(f"unknown option {key!r} (known: {', '.join(sorted([*OPTION_NAMES, *OWN_OPTIONS]))})")
        if name == "sizes" and isinstance(raw, (list, tuple)):
            raw = ",".join(map(str, raw))
        if name == "timing" and isinstance(raw, bool):
            raw = "on" if raw else "off"
        if kb_options.BY_NAME[name].kind is bool and not isinstance(raw, bool):
            # an ini's words ("yes", "on") are for files; a request says true or false, or it is a typo
            raise EvaluateError(f"{key}: expected true or false, got {raw!r}")
        try:
            values[name] = kb_options.value_of(kb_options.BY_NAME[name], raw, None)
        except kb_options.OptionError as e:
            raise EvaluateError(f"{key}: {e}") from None
    if own.get("deadline") is not None:
        try:
            own["deadline"] = float(own["deadline"])
        except (TypeError, ValueError):
            raise EvaluateError(f"deadline={own['deadline']!r}: expected seconds") from None
        if own["deadline"] <= 0:
            raise EvaluateError("deadline: must be > 0")
    if own.get("reward") is not None:
        from ..metrics.rewards import preset_named
        try:
            preset_named(own["reward"])
        except ValueError as e:
            raise EvaluateError(f"reward: {e}") from None
    return kb_options.settings(values), own


def find_problem(problem_id: str, problems_dir: str | Path | None = None, pkb: str | None = None,
                 cache_dir: Path | None = None) -> Problem:
    """Our problems by id (<category>/<name>), a PKB reference as pkb/<N>_<name> (needs `pkb`)."""
    from ..spec.problem import load_problem
    if not isinstance(problem_id, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*", problem_id) \
            or ".." in problem_id.split("/"):
        raise UnknownProblem(f"unknown problem {str(problem_id)[:80]!r}")
    if problem_id.startswith("pkb/"):
        if not pkb:
            raise UnknownProblem(f"{problem_id}: a ParallelKernelBench problem needs a PKB checkout (pkb=PATH)")
        from ..pkb import checkout
        stem = problem_id.removeprefix("pkb/")
        for name, found in checkout.load_problems(Path(pkb), cache_dir or Path(tempfile.gettempdir()) / "kb-cache"):
            if name == stem:
                if isinstance(found, ProblemError):
                    raise found
                return found
        raise UnknownProblem(f"unknown problem {problem_id!r} (no such reference in {pkb})")
    root = Path(problems_dir or default_problems_dir()).resolve()
    yaml_path = root / problem_id / "problem.yaml"
    if not yaml_path.is_file():
        raise UnknownProblem(f"unknown problem {problem_id!r} (no {problem_id}/problem.yaml under {root})")
    return load_problem(yaml_path, root)


def list_problems(problems_dir: str | Path | None = None) -> list[str]:
    root = Path(problems_dir or default_problems_dir())
    return sorted(p.parent.relative_to(root).as_posix() for p in root.glob("*/*/problem.yaml"))


@dataclass
class Evaluation:
    """One evaluation: the item's record as pytest would write it, and what a trainer reads off it."""
    id: str
    problem: str
    record: ItemRecord
    feedback: str
    queued_s: float = 0.0
    reward: dict | None = None          # {"preset", "version", "value"} when a preset was asked for
    extra: dict = field(default_factory=dict)

    @property
    def disposition(self) -> Disposition:
        return disposition_of(self.record.outcome)

    @property
    def components(self) -> dict:
        from ..metrics.rewards import components
        return components(self.record.to_dict())

    def to_dict(self) -> dict:
        return {"id": self.id, "problem": self.problem, "disposition": str(self.disposition),
                "outcome": self.record.outcome, "failure": self.record.failure, "components": self.components,
                "reward": self.reward, "feedback": self.feedback, "queued_s": self.queued_s,
                "record": self.record.to_dict(), **self.extra}

    @classmethod
    def from_dict(cls, data: dict) -> Evaluation:
        return cls(data["id"], data["problem"], ItemRecord.from_dict(data["record"]), data.get("feedback") or "",
                   data.get("queued_s") or 0.0, data.get("reward"))


def candidate_of(problem: Problem, code: str) -> Candidate:
    suffix = problem.kind_spec.suffix(problem.template)
    origin = f"solution{suffix}"
    if not isinstance(code, str) or not code.strip():
        return Candidate("api", "evaluate", None, origin=origin, failure=(Failure.NO_CODE, "the request has no code"))
    return Candidate("api", "evaluate", code, origin=origin,
                     failure=python_syntax(code, origin) if suffix == ".py" else None)


class Evaluator:
    """Evaluations one after another in this process, through one KBSession."""

    def __init__(self, problems_dir: str | Path | None = None, pkb: str | None = None,
                 workdir: str | Path | None = None, launcher: str = "fork") -> None:
        self.problems_dir = problems_dir
        self.pkb = pkb
        self._own_workdir = workdir is None          # made here: removed by close()
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kb-evaluate-"))
        self.launcher = launcher
        self._session: KBSession | None = None

    def session(self, settings: kb_options.Settings, nonce: str) -> KBSession:
        settings = dataclasses.replace(settings, launcher=self.launcher)
        if self._session is None:
            from ..spec import hardware
            machine = hardware.machine_info()
            self._session = KBSession(settings, self.workdir, "evaluate", nonce, machine,
                                      json_path=self.workdir / "evaluate.json")
        self._session.settings, self._session.nonce = settings, nonce
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        if self._own_workdir:
            import shutil
            shutil.rmtree(self.workdir, ignore_errors=True)     # (a later evaluation makes what it needs again)

    def evaluate(self, problem_id: str, code: str, options: dict | None = None, eval_id: str | None = None,
                 submitted: float | None = None) -> Evaluation:
        """One evaluation. A bad request (unknown problem, bad option) raises EvaluateError; every
        other end is a record: the candidate's verdict, a skip, or an error of the infrastructure."""
        eval_id = eval_id or secrets.token_hex(6)
        settings, own = settings_for(dict(options or {}))
        try:
            problem = find_problem(problem_id, self.problems_dir, self.pkb, self.workdir / ".kb-cache")
        except ProblemError as e:       # a problem folder that does not load: not the candidate's
            rec = base_record(None, None, f"evaluate/{eval_id}::test_problem[{problem_id}]")
            rec.end(Outcome.ERROR, Failure.INVALID_PROBLEM, str(e))
            return Evaluation(eval_id, problem_id, rec, f"Not run: {e}")
        queued = max(0.0, time.time() - submitted) if submitted else 0.0
        nodeid = f"evaluate/{eval_id}::test_problem[{problem.id}]"   # unique: the GPU pool's lease key
        rec = self._run(problem, code, settings, own, nodeid, queued)
        feedback = feedback_text(problem, rec)
        reward = None
        if own.get("reward"):
            from ..metrics import rewards
            reward = rewards.reward_entry(rec.to_dict(), own["reward"])
        return Evaluation(eval_id, problem.id, rec, feedback, queued, reward)

    def _run(self, problem: Problem, code: str, settings: kb_options.Settings, own: dict, nodeid: str,
             queued: float) -> ItemRecord:
        candidate = candidate_of(problem, code)
        if own.get("deadline") is not None and queued >= own["deadline"]:
            rec = base_record(problem, candidate, nodeid)
            rec.end(Outcome.ERROR, Failure.HARNESS_ERROR,
                    f"deadline met while queued: waited {queued:.1f} s of {own['deadline']:.0f} s (not run)")
            return rec
        if own.get("deadline") is not None:        # the job's own deadline is what is left of it
            left = own["deadline"] - queued
            planned = kb_options.per_item(settings.timeout, problem.timeout_s, kb_options.DEFAULT_TIMEOUT_S)
            settings = dataclasses.replace(settings, timeout=min(planned, left))
        nonce = settings.seed or secrets.token_hex(16)
        session = self.session(settings, nonce)
        # what the kb_placement and kb_candidate fixtures decide before run_item (fixtures.py)
        try:
            placement = session.place(problem)
            why = is_pkb(problem) and static.missing_modules(
                problem.reference_path.read_text(), problem.reference_path.resolve().parent.parent)
            if why:
                raise Skip(why)
            why = session.cpu_candidate_skip(problem, placement, candidate.is_reference)
            if why:
                raise Skip(why)
            if placement.device == "cpu" and is_pkb(problem):
                found = static.verdict(candidate, settings.allow_multicast)
                if found:
                    candidate.failure = found
                elif why := static.needs_cuda(candidate.source):
                    raise Skip(why)
        except Skip as e:
            rec = base_record(problem, candidate, nodeid)
            rec.end(Outcome.SKIPPED, message=str(e))
            return rec
        try:
            rec = session.run_item(problem, candidate, placement, nodeid)
        except Exception as e:  # noqa: BLE001 - an error of the harness, never the candidate's
            rec = base_record(problem, candidate, nodeid)
            rec.device, rec.world_size = placement.device, placement.world_size
            rec.end(Outcome.ERROR, Failure.HARNESS_ERROR, f"{type(e).__name__}: {e}")
            return rec
        if rec.job_dir and not own.get("keep_job"):
            # a failed job's folder (logs, candidate) is kept by a pytest run for people to read; a
            # scorer's record already carries what the feedback needs, and a service must not fill the disk
            from ..launch import remove_job_dir
            remove_job_dir(Path(rec.job_dir))
            rec.job_dir = None
        return rec


def feedback_text(problem: Problem, record: ItemRecord) -> str:
    """What a refinement round shows the model about this record (candidates/prompt.feedback)."""
    from ..candidates import prompt
    if record.outcome == Outcome.SKIPPED:
        return f"Not run: {record.message}"
    harness = problem.harness_path.read_text() if problem.harness_path.is_file() else ""
    native = problem if problem.kind_spec.language != "python" else None
    return prompt.feedback(record.to_dict(), 1, harness, record.device or "cpu", native)


_default: Evaluator | None = None


def evaluate(problem_id: str, code: str, **options: Any) -> Evaluation:
    """Score `code` as the candidate for `problem_id` (in this process; the rank server stays warm
    for the next call). Options: world_size, sizes, trials, timing, timing_rounds, seed, timeout,
    device, compile_timeout, pg_timeout, cpu_ranks, oversubscribe, deadline, reward (a preset name), and
    problems_dir / pkb (where problems come from)."""
    global _default
    where = {k: options.pop(k) for k in ("problems_dir", "pkb") if k in options}
    if _default is None or any(getattr(_default, k) != v for k, v in where.items()):
        if _default is not None:
            _default.close()
        _default = Evaluator(**where)
        import atexit
        atexit.register(_default.close)      # its rank server and scratch folder go with this process
    return _default.evaluate(problem_id, code, options)
