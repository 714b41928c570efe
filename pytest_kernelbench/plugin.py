"""pytest hooks only: options and ini, markers, collection, header, reports, summary.

Every problem folder (problems/<category>/<name>/problem.yaml) is one test item,
`test_problem[<category>/<name>]`, whose body is pytest_kernelbench.testcase.test_problem.
With --kb-pkb, so is every reference of a ParallelKernelBench checkout (`test_problem[pkb/<N>_<name>]`,
collect.py holds the collectors; the Problems come from pytest_kernelbench/pkb/).
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path
from collections.abc import Generator
from typing import TYPE_CHECKING

import pytest

from . import hookspec, options
from .candidates.files import CandidateError, parse_mode
from .fixtures import KB_PROBLEM, RECORDS, RUN_PLUGIN, kb_candidate, kb_placement, kb_problem, kb_session  # noqa: F401 (fixtures)
from .options import OPTIONS, Settings, help_text
from .pkb import checkout as pkb_checkout
from .pkb import pairing as pkb_pairing
from .run import BenchRun, ReportWriter, identity, is_kb_nodeid, kb_home, resumed_records
from .protocol import Containment
from .session import new_run_id
from .launch import registry
from .spec import hardware
from .spec.problem import CATEGORIES, DIFFICULTIES, LIBRARIES, PARALLELISMS, ProblemError, load_problem
from .collect import BrokenProblem, PkbSuite, ProblemFile, pkb_problems, problems_root

if TYPE_CHECKING:
    from xdist.workermanage import WorkerController

    from .launch.base import Launcher


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


@pytest.hookimpl(trylast=True)
def pytest_kb_make_launcher(config: pytest.Config, name: str) -> Launcher | None:
    """The built-in launchers answer last: a conftest or plugin may answer first (hookspec.py)."""
    return registry.make(name, settings_from(config))


def make_launcher(config: pytest.Config, name: str) -> Launcher:
    """The launcher --kb-launcher names; a name nobody answers is a one-line usage error."""
    launcher = config.hook.pytest_kb_make_launcher(config=config, name=name)
    if launcher is None:
        raise pytest.UsageError(f"--kb-launcher={name!r}: expected {registry.known()} (or a name a plugin "
                                "answers pytest_kb_make_launcher for)")
    return launcher


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kernelbench", "multi-GPU communication kernel benchmark")
    for o in OPTIONS:
        text = help_text(o.name)
        # argparse %-formats command-line help (a literal % must be doubled); ini help is printed as is
        if o.kind is bool:
            group.addoption(f"--kb-{o.name}", action="store_true", default=None, dest=o.ini, help=text.replace("%", "%%"))
            parser.addini(o.ini, text, type="bool", default=o.default)
        else:
            group.addoption(f"--kb-{o.name}", action="store", default=None, dest=o.ini, help=text.replace("%", "%%"))
            parser.addini(o.ini, text, default=None if o.default is None else str(o.default))


def settings_from(config: pytest.Config) -> Settings:
    """Every --kb-* value, checked: a bad value is a one-line usage error. Cheap (no torch, no
    machine probe, no files written): it runs in every pytest run that has the plugin installed.
    Each value is checked against its row (options.py); what needs another stage is checked here."""
    try:
        v = options.values({o.ini: config.getoption(o.ini) for o in OPTIONS},
                           {o.ini: config.getini(o.ini) for o in OPTIONS})
    except options.OptionError as e:
        raise pytest.UsageError(str(e)) from None
    try:
        parse_mode(v["candidate"])
    except CandidateError as e:
        raise pytest.UsageError(str(e)) from None
    if v["pkb"]:
        try:
            v["pkb"] = str(pkb_checkout.check_checkout(v["pkb"]))
        except pkb_checkout.CheckoutError as e:
            raise pytest.UsageError(str(e)) from None
    if v["nodes"] > 1 and v["launcher"] != "slurm":
        raise pytest.UsageError(f"--kb-nodes={v['nodes']}: an item spans nodes only with --kb-launcher=slurm")
    if v["launcher"] == "slurm" and not os.environ.get("SLURM_JOB_ID"):
        # else every item's srun fails, and each failure would be charged to its candidate as a crash
        raise pytest.UsageError("--kb-launcher=slurm runs inside a Slurm allocation (salloc / sbatch): "
                                "no SLURM_JOB_ID here")
    if v["resume"]:
        if not Path(v["resume"]).is_file() or not v["resume"].endswith(".jsonl"):
            raise pytest.UsageError(f"--kb-resume={v['resume']}: not a .jsonl report of an earlier run")
        v["report"] = str(Path(v["resume"]).with_suffix(".json"))
    elif v["report"]:
        path = Path(v["report"]) if Path(v["report"]).is_absolute() else kb_home(config, v["pkb"]) / v["report"]
        taken = [p for p in (path, path.with_suffix(".jsonl")) if p.exists()]
        if taken:   # appending a second run's lines to a report mixes two runs: never silently
            raise pytest.UsageError(f"--kb-report={v['report']}: {taken[0]} already exists; continue that run with "
                                    f"--kb-resume={path.with_suffix('.jsonl')} or choose another path")
    if v["solutions"] and not Path(v["solutions"]).is_dir():
        raise pytest.UsageError(f"--kb-solutions={v['solutions']}: not a directory")
    if v["solutions-only"] and not v["solutions"]:
        raise pytest.UsageError("--kb-solutions-only needs --kb-solutions=DIR")
    try:
        options.parse_baselines(v["baselines"])
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    _check_model_options(v)
    _check_compare(v)
    _check_gates(v)
    if v["allow-multicast"] and not hardware.multicast_supported():
        raise pytest.UsageError("--kb-allow-multicast: this machine reports no NVLink multicast support")
    return options.settings(v)


def _check_compare(v: dict):
    if not v["compare"] and not v["compare-fail"]:
        return
    if v["compare-fail"] and not v["compare"]:
        raise pytest.UsageError("--kb-compare-fail needs --kb-compare=BASE (the report to compare with)")
    from .report.diff import parse_fail_on
    from .report.reading import ReportError, load
    try:
        load(v["compare"])      # read once here, so a bad BASE never waits for the end of the run
    except ReportError as e:
        raise pytest.UsageError(f"--kb-compare: {e}") from None
    try:
        parse_fail_on(v["compare-fail"])
    except ValueError as e:
        raise pytest.UsageError(f"--kb-compare-fail: {e}") from None


def _check_gates(v: dict):
    from .metrics import gates
    from .spec.bandwidth import parse_sweep
    if v["sweep"]:
        try:
            parse_sweep(v["sweep"])
        except ValueError as e:
            raise pytest.UsageError(f"--kb-sweep: {e}") from None
    for name, kind in (("min-busbw", "busbw"), ("max-latency", "latency")):
        try:
            gates.parse(v[name], kind)
        except ValueError as e:
            raise pytest.UsageError(f"--kb-{name}: {e}") from None


def _check_model_options(v: dict):
    if v["model"] and v["solutions"]:
        raise pytest.UsageError("--kb-model and --kb-solutions both choose the candidates: give one")
    if v["model"] and not v["print-prompt"]:
        from .candidates import llm
        if not llm.available():
            raise pytest.UsageError(f"--kb-model={v['model']} needs litellm: pip install 'pytest-kernelbench[llm]'")
        problem = llm.preflight(v["model"], v["api-base"])
        if problem:
            raise pytest.UsageError(problem)


def run_label(settings: Settings) -> str:
    if settings.print_prompt:
        return "prompts"
    if settings.model:
        return "llm-" + settings.model
    if settings.solutions:
        return "dir-" + Path(settings.solutions).name
    return settings.candidate.replace(":", "-")


def pytest_cmdline_main(config: pytest.Config) -> None:
    """--kb-slurm-workers=N: the xdist workers are Slurm steps (launch/slurm_workers.py)."""
    n = config.getoption("kb_slurm_workers", None)
    if not n or hasattr(config, "workerinput") or config.getoption("collectonly", False):
        return None
    from .launch import slurm_workers
    if not os.environ.get("SLURM_JOB_ID"):
        raise pytest.UsageError("--kb-slurm-workers runs inside a Slurm allocation (salloc / sbatch): "
                                "no SLURM_JOB_ID here")
    if config.getoption("numprocesses", None) or config.getoption("tx", None):
        raise pytest.UsageError("--kb-slurm-workers starts the xdist workers itself: drop -n / --tx")
    slurm_workers.drop_job_options(os.environ)
    differ = slurm_workers.same_path_on_every_node(str(config.invocation_params.dir))
    if differ:
        raise pytest.UsageError("--kb-slurm-workers: the project and its Python must be at the same path on every "
                                "node: " + "; ".join(differ))
    # the report's machine facts: a node's, probed now, while no worker step holds the allocation
    slurm_workers.node_machine(str(config.invocation_params.dir), config.getoption("kb_calibrate", None) or "auto")
    config.option.tx = slurm_workers.tx_specs(n)
    if config.option.dist == "no":
        config.option.dist = "load"
    return None


def pytest_configure(config: pytest.Config) -> None:
    for marker, what in [(c, "category") for c in CATEGORIES] + [(p, "parallelism") for p in PARALLELISMS] + \
            [(d, "difficulty") for d in DIFFICULTIES] + [(lib, "library") for lib in LIBRARIES]:
        config.addinivalue_line("markers", f"{marker}: kernelbench problems with {what} '{marker}'")
    config.addinivalue_line("markers", "pkb: ParallelKernelBench problems (--kb-pkb)")
    config.addinivalue_line("markers", "non_llm: kernelbench problems from non-LLM workloads (PKB's taxonomy)")
    settings = settings_from(config)
    unused = options.ignored_without_model({o.name: getattr(settings, o.field) for o in OPTIONS})
    if unused and not hasattr(config, "workerinput"):
        config.issue_config_time_warning(pytest.PytestConfigWarning(unused), stacklevel=2)
    if settings.pkb:
        _collect_pkb(config, Path(settings.pkb) / "reference")
    worker = getattr(config, "workerinput", None)
    if worker and "kb_run" in worker:
        run_id, nonce = worker["kb_run"]["run_id"], worker["kb_run"]["nonce"]
    elif settings.resume:
        run_id, nonce = Path(settings.resume).stem, settings.seed or secrets.token_hex(16)
        _check_resume(settings, config)
    else:
        run_id, nonce = new_run_id(run_label(settings)), settings.seed or secrets.token_hex(16)
    run = BenchRun(config, settings, run_id, nonce, make_launcher(config, settings.launcher))
    config.pluginmanager.register(run, RUN_PLUGIN)
    if not worker:
        config.pluginmanager.register(ReportWriter(run), "kernelbench-report")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(run), "kernelbench-xdist")


def _check_resume(settings: Settings, config: pytest.Config) -> None:
    """A resumed run must measure what the earlier run measured: one line naming the first setting
    that differs."""
    lines, _ = resumed_records(settings.resume)
    earlier = next((r.get("run_config") for r in lines if r.get("run_config")), None)
    if earlier is None:
        raise pytest.UsageError(f"--kb-resume={settings.resume}: its lines carry no run configuration "
                                "(written by an older version): start a new run")
    now = identity(settings, kb_home(config, settings.pkb))
    for key, value in now.items():
        if earlier.get(key) != value and key == "pkb" and earlier.get(key) and value:
            raise pytest.UsageError(f"--kb-resume={settings.resume}: the earlier run used ParallelKernelBench "
                                    f"{pkb_checkout.describe(earlier[key])}, this one {pkb_checkout.describe(value)}; "
                                    "resume with the same PKB or start a new run")
        if earlier.get(key) != value:
            opt = "--kb-" + key.replace("_", "-")
            raise pytest.UsageError(f"--kb-resume={settings.resume}: the earlier run had {opt}={earlier.get(key)!r}, "
                                    f"this one {opt}={value!r}; resume with the same settings or start a new run")


class _XdistHooks:
    """Controller side of xdist: the run's id and nonce go to every worker, so all of them seed
    inputs alike and write into one report."""

    def __init__(self, run: BenchRun):
        self.run = run
        self.header_done = False

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: WorkerController) -> None:
        # no machine facts: each worker probes its own only if it runs an item (calibration is cached)
        node.workerinput["kb_run"] = {"run_id": self.run.run_id, "nonce": self.run.nonce}

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: WorkerController, ids: list[str]) -> None:
        if self.header_done or not any(is_kb_nodeid(i) for i in ids):
            return
        self.header_done = True
        self.run.kb_items = sum(1 for i in ids if is_kb_nodeid(i))
        # workers collect; the controller checks the selection once, from the ids the first one sent
        problems = []
        stems = {nodeid.partition("::test_problem[pkb/")[2].rstrip("]") for nodeid in ids if is_kb_nodeid(nodeid)}
        problems += [p for stem, p in pkb_problems(node.config) if stem in stems and not isinstance(p, ProblemError)]
        for nodeid in ids:
            if is_kb_nodeid(nodeid) and "::test_problem[pkb/" not in nodeid:
                try:
                    path = Path(node.config.rootpath) / nodeid.partition("::")[0]
                    problems.append(load_problem(path, problems_root(path)))
                except ProblemError:
                    pass
        try:
            self.run.validate(problems)
        except pytest.UsageError as e:
            pytest.exit(f"ERROR: {e}", returncode=pytest.ExitCode.USAGE_ERROR)
        _write_header(node.config, self.run)


def pytest_collection_finish(session: pytest.Session) -> None:
    run = session.config.pluginmanager.get_plugin(RUN_PLUGIN)
    if run is not None and run.kb_items and not hasattr(session.config, "workerinput"):
        _write_header(session.config, run)


def _write_header(config: pytest.Config, run: BenchRun) -> None:
    """Printed once kernelbench items are known to run (never for an unrelated pytest run)."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return
    tr.write_line(f"kernelbench: {hardware.describe(run.machine)}")
    layers = run.machine.get("isolation") or []
    missing = "" if any(x.startswith("landlock") for x in layers) else \
        " (no Landlock on this kernel: a candidate can read whatever its user can)"
    tr.write_line(f"kernelbench: isolation of candidates: {', '.join(layers)}{missing}")
    if run.machine.get("containment"):
        how = {Containment.CGROUP: "a cgroup per job, killed whole at its end",
               Containment.SCAN: "no writable cgroup v2: /proc scans, and every orphan of ours killed"}
        tr.write_line(f"kernelbench: containment of jobs: {run.machine['containment']} "
                      f"({how.get(run.machine['containment'], '?')})")
    if run.machine.get("cluster"):
        from .launch.slurm_workers import describe_layout
        tr.write_line(f"kernelbench: {describe_layout(run.machine['cluster'], run.settings.slurm_workers, run.settings.nodes)}")
    if run.settings.oversubscribe:
        tr.write_line("kernelbench: --kb-oversubscribe: a CUDA world size that does not fit runs with its ranks "
                      "sharing GPUs, over gloo (shared GPU: correctness only, no speed)")
    where = "no report (--collect-only)" if config.option.collectonly else f"report {run.json_path}"
    tr.write_line(f"kernelbench: run {run.run_id}, candidate {run_label(run.settings)}, {where}")
    if run.pkb:
        tr.write_line(f"kernelbench: ParallelKernelBench {run.pkb['checkout']['name']}, "
                      f"{pkb_checkout.describe(run.pkb['checkout'])}")
        for line in pkb_pairing.header_lines(run.pkb.get("solutions")):
            tr.write_line(f"kernelbench: {line}")


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> Generator[None, None, None]:
    """A problem that does not load has no fields to select it by: it stays in every -m / -k
    selection (only --deselect drops it), so that a broken problem.yaml never vanishes from a run."""
    place = {id(i): n for n, i in enumerate(items)}
    broken = [i for i in items if isinstance(i, BrokenProblem)
              and not i.nodeid.startswith(tuple(config.getoption("deselect", None) or ()))]
    items[:] = [i for i in items if not isinstance(i, BrokenProblem)]
    try:
        return (yield)
    finally:
        kept = [place.get(id(i), -1) for i in items]
        items.extend(broken)
        if kept == sorted(kept):        # nobody reordered: each broken problem goes back where it was
            items.sort(key=lambda i: place.get(id(i), -1))
        run = config.pluginmanager.get_plugin(RUN_PLUGIN)
        if run is not None:
            run.kb_items += len(broken)


def _collect_pkb(config: pytest.Config, reference: Path) -> None:
    """The checkout's reference/ folder is one more path to collect; without paths given on the
    command line it is the only one (the PKB suite alone, not testpaths as well). An argument that
    names PKB items, as node ids do (pkb/<N>_<name>.py[::test_problem[...]]) or as a path inside
    reference/, collects those items only."""
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args[:] = []
    config.args[:] = [pkb_checkout.collect_arg(a, reference) for a in config.args]
    if not any(pkb_checkout.inside(a.partition("::")[0], reference) for a in config.args):
        config.args.append(str(reference))


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    run = parent.config.pluginmanager.get_plugin(RUN_PLUGIN)
    if run is not None and run.settings.pkb and path == Path(run.settings.pkb) / "reference":
        return PkbSuite.from_parent(parent, path=path)
    return None


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.name == "problem.yaml":
        return ProblemFile.from_parent(parent, path=file_path)
    return None
