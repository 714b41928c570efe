"""Every --kb-* option, once: its name, type, default, allowed values and help (OPTIONS). The
command line, the ini keys, `pytest --help`, the option table of docs/options.md and the `Settings` every
stage reads are all made from this one table, so adding an option is adding one row.

Precedence (`value_of`, the one place it is decided): the command line, else the ini file
(`kb_<name>` in pytest.ini / pyproject / tox.ini), else the row's default. Two settings a problem
can also give (problem.yaml `timeout_s`, its world sizes) are resolved per item by `per_item`:
the command line or ini wins, then problem.yaml, then the default.

No pytest, no torch: every stage may import this module (the ranks never need it).
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from .protocol import JobSpec

DEFAULT_TIMEOUT_S = 300.0        # an item's deadline when neither the options nor problem.yaml give one


class OptionError(ValueError):
    """A bad option value; str() is the one line the user sees (pytest shows it as a usage error)."""


class Option(NamedTuple):
    name: str                              # --kb-<name>, ini kb_<name with _>, Settings.<name with _>
    kind: type                             # str | int | float | bool
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    minimum: float | None = None           # smallest value allowed (None: any)
    positive: bool = False                 # must be > 0
    path: bool = False                     # names a file or folder: ~ is expanded
    convert: Callable[[Any], Any] | None = None   # what Settings holds, from the checked value

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")

    @property
    def ini(self) -> str:
        return "kb_" + self.field


def _sizes(v: str | None) -> list[str] | None:
    return v.split(",") if v else None


BASELINES_NONE, BASELINES_ALL = "none", "all"
BASELINE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")     # problem.yaml's baselines: names (spec/baselines.py)


def parse_baselines(v: str | None) -> str | tuple[str, ...]:
    """--kb-baselines: "all", "none", or the names asked for (a tuple); ValueError for anything else."""
    text = (v or BASELINES_NONE).strip()
    if text in (BASELINES_NONE, BASELINES_ALL):
        return text
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names or not all(BASELINE_NAME.match(n) for n in names):
        raise ValueError(f"--kb-baselines={v!r}: expected all, none or NAME,NAME (names as problem.yaml's "
                         "baselines spell them)")
    return names


OPTIONS: list[Option] = [
    Option("candidate", str, "auto", "auto | reference | shipped | shipped:NAME (auto: a shipped solution that runs "
           "here, else the reference as self-check)"),
    Option("solutions", str, None, "directory of hand-written candidates: DIR/<category>/<name>.py "
           "(PKB items: DIR/<N>_<name>_<backend>.py, PKB's layout); a problem without a file fails no_code", path=True),
    Option("solutions-only", bool, False, "with --kb-solutions: run only the problems the folder has a file for "
           "(the others skip, not counted): checking a few kernels of your own"),
    Option("device", str, "auto", "auto | cpu | cuda", choices=("auto", "cpu", "cuda")),
    Option("nproc", int, None, "world size (default: the largest valid one that fits)", positive=True),
    Option("cpu-ranks", int, 4, "most ranks to start for a CPU (gloo) item", positive=True),
    # no choices: a plugin's launcher (hookspec.pytest_kb_make_launcher) is a name too; plugin.py checks it
    Option("launcher", str, "fork", "fork | torchrun | slurm | a launcher a plugin answers pytest_kb_make_launcher "
           "for: how a job's ranks start (fork: from a rank server that has imported torch, a fresh process per rank "
           "of each item; torchrun: torch.distributed.run per item; slurm: one srun step per item over --kb-nodes "
           "nodes of the allocation)"),
    Option("nodes", int, 1, "nodes one item's ranks span (--kb-launcher=slurm: one srun step per item; world sizes "
           "must divide evenly; the process-group timeout is then at least 60 s)", positive=True),
    Option("slurm-workers", int, None, "inside a Slurm allocation: run N xdist workers, each a Slurm step on one node "
           "(`srun -u -N1 -n1 --exact python`); Slurm places them, xdist spreads the items", positive=True),
    Option("timeout", float, None, "deadline in seconds for one item's job (default: problem.yaml timeout_s, else "
           f"{DEFAULT_TIMEOUT_S:.0f})", positive=True),
    Option("compile-timeout", float, JobSpec.compile_timeout_s, "cap in seconds on importing/compiling a candidate "
           "and on its first call of each size (setup: JIT compiles, rendezvous); not counted in --kb-timeout"),
    Option("pg-timeout", float, JobSpec.pg_timeout_s, "process-group timeout in seconds inside a job (short, so "
           "hangs surface fast; the first call of each size gets the compile budget instead)"),
    Option("sizes", str, None, "comma-separated size names (default: tiny on CPU, every other size on CUDA)",
           convert=_sizes),
    Option("sweep", str, None, "BEGIN:END:FACTOR (nccl-tests' -b/-e/-f; sizes with K/M/G, e.g. 8K:256M:2): run each "
           "size S from BEGIN to END, times FACTOR, of the problems whose problem.yaml declares the size field that "
           "scales (scale); named sizes still run when --kb-sizes names them; other problems skip"),
    Option("trials", int, 2, "correctness trials per size, each on fresh inputs", positive=True),
    Option("timing", str, "on", "on | off", choices=("on", "off"), convert=lambda v: v == "on"),
    Option("timing-rounds", int, None, "timed rounds per size (at least 5; an odd count is rounded up to even)",
           minimum=5),
    Option("seed", str, None, "fix the run nonce (inputs become reproducible; default: fresh every run)"),
    Option("allow-multicast", bool, False, "let candidates use NVLink multicast (multimem, NVLS); refused unless the "
           "machine reports it (never on shared machines)"),
    Option("exclusive", bool, False, "run each GPU item alone on the machine (final numbers)"),
    Option("oversubscribe", bool, False, "run a CUDA item's W ranks on fewer GPUs than W where its world size does not "
           "fit (several ranks per GPU, both process groups over gloo): correctness only, never timed; a problem "
           "that needs NCCL or distinct GPUs skips (docs/one-gpu.md)"),
    Option("keep-jobs", bool, False, "keep the job folders (logs, candidate) of passed items too"),
    Option("report", str, None, "path of the JSON report (default reports/<run-id>.json; the JSONL sits beside it)",
           path=True),
    Option("calibrate", str, "auto", "auto | off | force: measure this machine's ceilings once (cached) for the "
           "roofline", choices=("auto", "off", "force")),
    Option("resume", str, None, "continue a cut-short run from its JSONL: finished items are not run again",
           path=True),
    Option("pkb", str, None, "a ParallelKernelBench checkout: its reference/<N>_<name>.py problems run as items "
           "pkb/<N>_<name> (alone, unless paths to collect are given too)", path=True),
    Option("pkb-backend", str, "cuda", "cuda | triton | parallelkittens: which PKB candidates --kb-solutions holds "
           "(<N>_<name>_<backend>.py, or the names of PKB's published solutions)",
           choices=("cuda", "triton", "parallelkittens")),
    Option("per-size", bool, False, "print a row per item and size after the table: nccl-tests' size S in bytes, "
           "reference and candidate time (median and p99 over the rounds, each round the max over ranks), algbw and "
           "busbw (GB/s; busbw where problem.yaml declares its collective), speedup with its band, roofline share"),
    Option("baselines", str, "none", "all | none | NAME,NAME: also time the baselines a problem.yaml declares "
           "(other backends: torch symmetric-memory ops, a point-to-point ring, ...) in the same rounds, shown as "
           "\"vs NAME\" columns of --kb-per-size and each size's vs / best_backend in the JSON; the score stays the "
           "reference's. Every baseline adds a window to each round, so none by default", convert=parse_baselines),
    Option("min-busbw", str, None, "fail the session when a passed GPU item's candidate busbw is below a bound: "
           "GB/s, or [ITEM][@SIZE]=GB/s,... (ITEM a glob over problem ids, SIZE a size name or bytes such as 256M); "
           "without @SIZE the mean over the item's sizes, nccl-tests' Avg bus bandwidth"),
    Option("max-latency", str, None, "fail the session when a passed GPU item's candidate median time per call "
           "exceeds a bound: TIME (us; or ms, s), or [ITEM][@SIZE]=TIME,... (without @SIZE: every size)"),
    Option("compare", str, None, "an earlier JSON report: print this run's per-item and aggregate deltas against "
           "it under the summary (kernelbench compare BASE NEW does the same from two reports)", path=True),
    Option("compare-fail", str, None, "with --kb-compare: fail the session on a regression, e.g. speedup:5%,pass "
           "(a speed drop past 5% outside the noise bands; an item that passed before and not now); per size, "
           "latency:15% (the candidate's median time up) and busbw:5% (its busbw, else algbw, down)"),
    # model generation: candidates written by a model through litellm (pip install 'pytest-kernelbench[llm]')
    Option("model", str, None, "litellm model string (e.g. anthropic/claude-opus-4-7): the model writes every "
           "candidate"),
    Option("samples", int, 1, "independent candidates per problem (pass@k, fast_1@k)", positive=True),
    Option("rounds", int, 1, "refinement rounds: a failing (or, on GPUs, slower) round is fed back to the model",
           positive=True),
    Option("temperature", float, None, "sampling temperature (default: the provider's)", minimum=0),
    Option("max-tokens", int, None, "most completion tokens per answer (default: the provider's)", positive=True),
    Option("api-base", str, None, "base URL of the model's API (an OpenAI-compatible server, a proxy)"),
    Option("max-cost", float, None, "budget in USD for the whole run: no new call once spent (items skip: budget "
           "spent)", minimum=0),
    Option("print-prompt", bool, False, "write every prompt to reports/<run-id>/prompts/ and call nothing"),
    Option("regenerate", bool, False, "ignore cached generations (call the model again, refresh the cache)"),
    Option("request-timeout", float, 600.0, "seconds one API request may take", positive=True),
    Option("retries", int, 5, "retries of a rate-limited, timed-out or failed API request (exponential backoff)",
           minimum=0),
    Option("cache-dir", str, None, "cache of generations and prompt facts (default <rootdir>/.kb-cache)", path=True),
]
BY_NAME = {o.name: o for o in OPTIONS}
# what only a model run reads (--kb-model, or --kb-print-prompt's prompts): given without one, a warning
MODEL_ONLY = ("samples", "rounds", "temperature", "max-tokens", "api-base", "max-cost", "regenerate",
              "request-timeout", "retries")


def ignored_without_model(v: Mapping[str, Any]) -> str | None:
    """The warning for model-only options set (not at their default) in a run without a model."""
    if v.get("model") or v.get("print-prompt"):
        return None
    given = [f"--kb-{n}" for n in MODEL_ONLY if v.get(n) != BY_NAME[n].default]
    if not given:
        return None
    return f"{', '.join(given)}: read only with --kb-model (a model writes the candidates); ignored in this run"


def shown_default(o: Option, none: str = "none") -> str:
    if o.kind is bool:
        return "on" if o.default else "off"
    return none if o.default is None else str(o.default)


def help_text(name: str) -> str:
    """The option's help: its text and its default (what `pytest --help` shows)."""
    o = BY_NAME[name]
    return f"{o.help} (default: {shown_default(o)})"


def value_of(o: Option, cli: Any, ini: Any) -> Any:
    """The precedence, decided here only: command line, else ini, else the default; then typed and
    checked against the row (OptionError names the option and what it expected)."""
    raw = cli if cli is not None else ini
    if raw is None or raw == "":
        return o.default
    if o.kind is bool:
        return bool(raw) if not isinstance(raw, str) else raw.strip().lower() in ("1", "true", "yes", "on")
    try:
        value = o.kind(raw)
    except (TypeError, ValueError):
        raise OptionError(f"--kb-{o.name}={raw!r}: expected {o.kind.__name__}") from None
    if o.path and isinstance(value, str):
        value = os.path.expanduser(value)      # shells do not expand ~ after --opt=
    if o.choices and value not in o.choices:
        raise OptionError(f"--kb-{o.name}={value!r}: expected {', '.join(o.choices[:-1])} or {o.choices[-1]}")
    if o.positive and value <= 0:
        raise OptionError(f"--kb-{o.name}={value}: must be > 0")
    if o.minimum is not None and value < o.minimum:
        raise OptionError(f"--kb-{o.name}={value}: must be >= {o.minimum:g}")
    return value


def values(cli: Mapping[str, Any], ini: Mapping[str, Any]) -> dict[str, Any]:
    """Every option's checked value by option name, from the command line's and the ini's raw values
    (keyed by the ini name, kb_<name>)."""
    return {o.name: value_of(o, cli.get(o.ini), ini.get(o.ini)) for o in OPTIONS}


def _settings_default(o: Option) -> Any:
    return o.convert(o.default) if o.convert else o.default


if TYPE_CHECKING:
    class Settings:
        """Typed as open for mypy: the fields are the rows of OPTIONS (made below at run time)."""
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]     # a dataclass (asdict, replace)
        def __init__(self, **fields: Any) -> None: ...
        def __getattr__(self, name: str) -> Any: ...
else:
    # one field per row, named like the option with _; its default is the row's, converted
    Settings = dataclasses.make_dataclass(
        "Settings", [(o.field, Any, dataclasses.field(default=_settings_default(o))) for o in OPTIONS])
    Settings.__module__ = __name__       # (make_dataclass's module= needs Python 3.12)
    Settings.__doc__ = "Every --kb-* value of a run, by field name (options.OPTIONS)."


def settings(v: Mapping[str, Any]) -> Settings:
    """Settings from checked values (by option name), each converted as its row says."""
    return Settings(**{o.field: (o.convert(v[o.name]) if o.convert else v[o.name]) for o in OPTIONS})


def per_item(settings_value: Any, problem_value: Any, default: Any = None) -> Any:
    """A setting a problem.yaml may also give: the command line or ini wins, then problem.yaml,
    then the built-in default."""
    if settings_value is not None:
        return settings_value
    return problem_value if problem_value is not None else default


PAGE = "docs/options.md"      # the option reference, relative to the checkout's root
TABLE_MARKS = ("<!-- options: generated from options.OPTIONS by `python -m pytest_kernelbench.options` -->",
                "<!-- options: end -->")


def options_markdown() -> str:
    """The option table of docs/options.md (between TABLE_MARKS), made from OPTIONS so it cannot drift."""
    rows = ["| option (ini `kb_*`) | default | what it does |", "|---|---|---|"]
    for o in OPTIONS:
        value = "" if o.kind is bool else f"={o.name.split('-')[-1].upper()}"
        rows.append(f"| `--kb-{o.name}{value}` | {shown_default(o, '-')} | {o.help} |")
    return "\n".join(rows)


def write_options_page(page: Any) -> bool:
    """Put the option table into docs/options.md; True when it changed."""
    from pathlib import Path
    page = Path(page)
    text = page.read_text()
    head, rest = text.split(TABLE_MARKS[0], 1)
    _, tail = rest.split(TABLE_MARKS[1], 1)
    new = f"{head}{TABLE_MARKS[0]}\n{options_markdown()}\n{TABLE_MARKS[1]}{tail}"
    if new != text:
        page.write_text(new)
    return new != text


if __name__ == "__main__":
    from pathlib import Path
    changed = write_options_page(Path(__file__).resolve().parent.parent / PAGE)
    print(f"{PAGE} option table " + ("updated" if changed else "already up to date"))
