"""pytest hooks only: options and ini, markers, collection, header, reports, summary.

Every problem folder (problems/<category>/<name>/problem.yaml) is one test item,
`test_problem[<category>/<name>]`, whose body is pytest_kernelbench.testcase.test_problem.
"""
from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from . import hardware, report
from .candidates.files import CandidateError, parse_mode
from .problem import CATEGORIES, DIFFICULTIES, LIBRARIES, PARALLELISMS, ProblemError, load_problem
from .session import KBSession, Settings, new_run_id
from .testcase import kb_candidate, kb_placement, kb_problem, kb_session, test_problem  # noqa: F401 (fixtures)

# (option, type, default, help). Each is --kb-<name> on the command line and kb_<name> in ini.
OPTIONS = [
    ("candidate", str, "auto", "auto | reference | shipped | shipped:NAME (auto: a shipped solution that runs here, else the reference as self-check)"),
    ("solutions", str, None, "directory of hand-written candidates: DIR/<category>/<name>.py"),
    ("device", str, "auto", "auto | cpu | cuda"),
    ("nproc", int, None, "world size (default: the largest valid one that fits)"),
    ("cpu-ranks", int, 4, "most ranks to start for a CPU (gloo) item"),
    ("timeout", float, None, "deadline in seconds for one item's torchrun job (default: problem.yaml timeout_s, else 300)"),
    ("compile-timeout", float, 600.0, "cap in seconds on importing/compiling a candidate (not counted in --kb-timeout)"),
    ("pg-timeout", float, 20.0, "process-group timeout in seconds inside a job (short, so hangs surface fast)"),
    ("sizes", str, None, "comma-separated size names (default: tiny on CPU, every other size on CUDA)"),
    ("trials", int, 2, "correctness trials per size, each on fresh inputs"),
    ("timing", str, "on", "on | off"),
    ("timing-rounds", int, None, "timed rounds per size (at least 5; an odd count is rounded up to even)"),
    ("seed", str, None, "fix the run nonce (inputs become reproducible; default: fresh every run)"),
    ("enforce-forbid", bool, False, "fail forbidden calls on CPU too (always enforced on CUDA)"),
    ("exclusive", bool, False, "run each GPU item alone on the machine (final numbers)"),
    ("keep-jobs", bool, False, "keep the job folders (logs, candidate) of passed items too"),
    ("report", str, None, "path of the JSON report (default reports/<run-id>.json; the JSONL sits beside it)"),
    ("calibrate", str, "auto", "auto | off | force: measure this machine's ceilings once (cached) for the roofline"),
    ("resume", str, None, "continue a cut-short run from its JSONL: finished items are not run again"),
    # model generation: candidates written by a model through litellm (pip install 'pytest-kernelbench[llm]')
    ("model", str, None, "litellm model string (e.g. anthropic/claude-opus-4-7): the model writes every candidate"),
    ("samples", int, 1, "independent candidates per problem (pass@k, fast_1@k)"),
    ("rounds", int, 1, "refinement rounds: a failing (or, on GPUs, slower) round is fed back to the model"),
    ("temperature", float, None, "sampling temperature (default: the provider's)"),
    ("max-tokens", int, None, "most completion tokens per answer (default: the provider's)"),
    ("api-base", str, None, "base URL of the model's API (an OpenAI-compatible server, a proxy)"),
    ("max-cost", float, None, "budget in USD for the whole run: no new call once spent (items skip: budget spent)"),
    ("print-prompt", bool, False, "write every prompt to reports/<run-id>/prompts/ and call nothing"),
    ("regenerate", bool, False, "ignore cached generations (call the model again, refresh the cache)"),
    ("request-timeout", float, 600.0, "seconds one API request may take"),
    ("retries", int, 5, "retries of a rate-limited, timed-out or failed API request (exponential backoff)"),
    ("cache-dir", str, None, "cache of generations and prompt facts (default <rootdir>/.kb-cache)"),
]


def pytest_addoption(parser):
    group = parser.getgroup("kernelbench", "multi-GPU communication kernel benchmark")
    for name, kind, default, help_text in OPTIONS:
        ini = "kb_" + name.replace("-", "_")
        if kind is bool:
            group.addoption(f"--kb-{name}", action="store_true", default=None, dest=ini, help=help_text)
            parser.addini(ini, help_text, type="bool", default=default)
        else:
            group.addoption(f"--kb-{name}", action="store", default=None, dest=ini, help=help_text)
            parser.addini(ini, help_text, default=None if default is None else str(default))


def _value(config, name, kind, default):
    ini = "kb_" + name.replace("-", "_")
    raw = config.getoption(ini)
    if raw is None:
        raw = config.getini(ini)
    if raw is None or raw == "":
        return default
    if kind is bool:
        return bool(raw) if not isinstance(raw, str) else raw.strip().lower() in ("1", "true", "yes", "on")
    try:
        return kind(raw)
    except ValueError:
        raise pytest.UsageError(f"--kb-{name}={raw!r}: expected {kind.__name__}") from None


def settings_from(config) -> Settings:
    v = {name: _value(config, name, kind, default) for name, kind, default, _ in OPTIONS}
    try:
        parse_mode(v["candidate"])
    except CandidateError as e:
        raise pytest.UsageError(str(e)) from None
    if v["device"] not in ("auto", "cpu", "cuda"):
        raise pytest.UsageError(f"--kb-device={v['device']!r}: expected auto, cpu or cuda")
    if v["calibrate"] not in ("auto", "off", "force"):
        raise pytest.UsageError(f"--kb-calibrate={v['calibrate']!r}: expected auto, off or force")
    if v["timing"] not in ("on", "off"):
        raise pytest.UsageError(f"--kb-timing={v['timing']!r}: expected on or off")
    if v["resume"]:
        if not Path(v["resume"]).is_file() or not v["resume"].endswith(".jsonl"):
            raise pytest.UsageError(f"--kb-resume={v['resume']}: not a .jsonl report of an earlier run")
        v["report"] = str(Path(v["resume"]).with_suffix(".json"))
    if v["solutions"] and not Path(v["solutions"]).is_dir():
        raise pytest.UsageError(f"--kb-solutions={v['solutions']}: not a directory")
    for name in ("nproc", "cpu-ranks", "trials", "timeout", "timing-rounds"):
        if v[name] is not None and v[name] <= 0:
            raise pytest.UsageError(f"--kb-{name}={v[name]}: must be > 0")
    if v["timing-rounds"] is not None and v["timing-rounds"] < 5:
        raise pytest.UsageError(f"--kb-timing-rounds={v['timing-rounds']}: at least 5 rounds")
    _check_model_options(v)
    return Settings(candidate=v["candidate"], solutions=v["solutions"], device=v["device"], nproc=v["nproc"],
                    cpu_ranks=v["cpu-ranks"], timeout=v["timeout"], compile_timeout=v["compile-timeout"],
                    pg_timeout=v["pg-timeout"], sizes=v["sizes"].split(",") if v["sizes"] else None,
                    trials=v["trials"], timing=v["timing"] == "on", timing_rounds=v["timing-rounds"],
                    seed=v["seed"], enforce_forbid=v["enforce-forbid"], exclusive=v["exclusive"],
                    keep_jobs=v["keep-jobs"], report=v["report"], resume=v["resume"],
                    calibrate=v["calibrate"], model=v["model"], samples=v["samples"], rounds=v["rounds"],
                    temperature=v["temperature"], max_tokens=v["max-tokens"], api_base=v["api-base"],
                    max_cost=v["max-cost"], print_prompt=v["print-prompt"], regenerate=v["regenerate"],
                    request_timeout=v["request-timeout"], retries=v["retries"], cache_dir=v["cache-dir"])


def _check_model_options(v: dict):
    for name in ("samples", "rounds", "max-tokens", "request-timeout"):
        if v[name] is not None and v[name] <= 0:
            raise pytest.UsageError(f"--kb-{name}={v[name]}: must be > 0")
    for name in ("temperature", "max-cost", "retries"):
        if v[name] is not None and v[name] < 0:
            raise pytest.UsageError(f"--kb-{name}={v[name]}: must be >= 0")
    if v["model"] and v["solutions"]:
        raise pytest.UsageError("--kb-model and --kb-solutions both choose the candidates: give one")
    if v["model"] and not v["print-prompt"]:
        from .candidates import llm
        if not llm.available():
            raise pytest.UsageError(f"--kb-model={v['model']} needs litellm: pip install 'pytest-kernelbench[llm]'")


def run_label(settings: Settings) -> str:
    if settings.print_prompt:
        return "prompts"
    if settings.model:
        return "llm-" + settings.model
    if settings.solutions:
        return "dir-" + Path(settings.solutions).name
    return settings.candidate.replace(":", "-")


def pytest_configure(config):
    for marker, what in [(c, "category") for c in CATEGORIES] + [(p, "parallelism") for p in PARALLELISMS] + \
            [(d, "difficulty") for d in DIFFICULTIES] + [(lib, "library") for lib in LIBRARIES]:
        config.addinivalue_line("markers", f"{marker}: kernelbench problems with {what} '{marker}'")
    # one broken problem.yaml must not stop the others from running
    config.option.continue_on_collection_errors = True
    settings = settings_from(config)
    worker = getattr(config, "workerinput", None)
    if worker and "kb_run" in worker:
        shared = worker["kb_run"]
        run_id, nonce, machine = shared["run_id"], shared["nonce"], shared["machine"]
    elif settings.resume:
        run_id = Path(settings.resume).stem
        nonce = settings.seed or secrets.token_hex(16)
        machine = hardware.machine_info()
    else:
        run_id = new_run_id(run_label(settings))
        nonce = settings.seed or secrets.token_hex(16)
        machine = hardware.machine_info()
    if not worker and machine.get("gpu_count") and settings.calibrate != "off":
        from . import calibrate
        measured = calibrate.calibrated(machine, force=settings.calibrate == "force")
        machine["calibration"] = measured
        machine["ceilings"] = calibrate.ceilings(machine, measured)
    session = KBSession(settings, config.rootpath, run_id, nonce, machine)
    _CONFIG["config"] = config
    config.stash[SESSION] = session
    config.stash[ITEMS] = []
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(), "kernelbench-xdist")


SESSION = pytest.StashKey()
ITEMS = pytest.StashKey()
DOC = pytest.StashKey()
LOGGED = pytest.StashKey()
_CONFIG = {}  # pytest_runtest_logreport gets no config argument


class _XdistHooks:
    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node):
        s = node.config.stash[SESSION]
        node.workerinput["kb_run"] = {"run_id": s.run_id, "nonce": s.nonce, "machine": s.machine}


def is_controller(config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_report_header(config):
    s = config.stash.get(SESSION, None)
    if s is None:
        return None
    return [f"kernelbench: {hardware.describe(s.machine)}",
            f"kernelbench: run {s.run_id}, candidate {run_label(s.settings)}, report {s.json_path}"]


class ProblemFile(pytest.File):
    def collect(self):
        root = _problems_root(self.path)
        try:
            problem = load_problem(self.path, root)
        except ProblemError as e:
            raise self.CollectError(str(e)) from None
        item = pytest.Function.from_parent(self, name=f"test_problem[{problem.id}]", callobj=test_problem,
                                           originalname="test_problem")
        item.kb_problem = problem
        for marker in problem.markers:
            item.add_marker(marker)
        yield item

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, self.CollectError):
            return str(excinfo.value.args[0])
        return super().repr_failure(excinfo)


def _problems_root(yaml_path: Path) -> Path:
    """problems/<category>/<name>/problem.yaml -> problems/ (ids are '<category>/<name>')."""
    return yaml_path.parent.parent.parent


def pytest_collect_file(file_path, parent):
    if file_path.name == "problem.yaml":
        return ProblemFile.from_parent(parent, path=file_path)
    return None


def pytest_collection_modifyitems(session, config, items):
    """--kb-resume: items that already finished in the earlier run are deselected."""
    s = config.stash.get(SESSION, None)
    if s is None or not s.settings.resume:
        return
    done = {r.get("nodeid") for r in report.read_jsonl(Path(s.settings.resume))
            if r.get("outcome") in ("passed", "failed")}   # skipped/API-error items are retried
    keep = [i for i in items if i.nodeid not in done]
    dropped = [i for i in items if i.nodeid in done]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_runtest_logreport(report):
    """Controller side (also under xdist): one JSONL line per finished item, written at once."""
    if report.when == "teardown":
        return
    records = [v for k, v in report.user_properties if k == "kb_result"]
    if not records:
        return
    config = _CONFIG.get("config")
    if config is None or not is_controller(config):
        return
    s = config.stash[SESSION]
    items = config.stash[ITEMS]
    log = report_log(s)
    # an item's user_properties reach both its setup and call reports: log each record once
    seen = config.stash.setdefault(LOGGED, set())
    for rec in records:
        key = (rec.get("nodeid"), rec.get("sample"), rec.get("round"))
        if key in seen:
            continue
        seen.add(key)
        items.append(rec)
        log.append(rec)


def report_log(s: KBSession) -> report.JsonlLog:
    return report.JsonlLog(s.jsonl_path)


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not is_controller(config) or SESSION not in config.stash:
        return
    s = config.stash[SESSION]
    items = config.stash[ITEMS]
    if not items:
        return
    doc = report.write_json(s.json_path, s.machine, _config_record(config, s), report.read_jsonl(s.jsonl_path) or items)
    config.stash[DOC] = doc


def _config_record(config, s: KBSession) -> dict:
    from dataclasses import asdict
    return {"run_id": s.run_id, "nonce": s.nonce, "settings": asdict(s.settings), "args": list(config.invocation_params.args)}


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    doc = config.stash.get(DOC, None)
    if not is_controller(config) or doc is None:
        return
    tr = terminalreporter
    tr.write_sep("=", "kernelbench")
    for line in report.table(doc["items"]):
        tr.write_line(line)
    tr.write_line("")
    for line in report.summary_lines(doc):
        tr.write_line(line)
    s = config.stash[SESSION]
    tr.write_line(f"report: {s.json_path}  (per-item log: {s.jsonl_path})")
