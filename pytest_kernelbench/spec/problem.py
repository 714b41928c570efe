"""Load and validate a problem folder: problem.yaml, reference.py, harness.py, solutions/.

Runs in the pytest process, so it never imports reference, harness or solution code: it checks
the harness's functions by parsing its source.
"""
from __future__ import annotations

import ast
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import bandwidth, baselines, shared
from .kinds import KINDS, Kind

CATEGORIES = ("p2p", "collective", "ep", "fusion", "utility")
PARALLELISMS = ("tp", "sp", "cp", "dp", "fsdp", "ep", "pp")
DIFFICULTIES = ("easy", "medium", "hard")
LIBRARIES = ("nccl", "gloo", "symm_mem", "nvshmem", "triton", "cuda", "cublas", "mscclpp", "deepep",
             "cuda_ipc", "nccl_device", "posix_shm")
METRICS = ("time", "latency", "bandwidth")
DEVICES = ("cpu", "cuda")
# integer dtypes: problems whose work is indices and counts (the dispatch layouts); complex64:
# spectral work (utility/distributed_fft_pencil), compared as complex (rank/compare.py)
DTYPES = ("float32", "float16", "bfloat16", "int32", "int64", "complex64")
FORBID_FAMILIES = ("collectives", "p2p", "symm_mem_ops")
# Defaults by dtype: sums over ranks are re-associated by any other algorithm, so bf16/fp16
# need room for rounding of the reduction order.
DEFAULT_TOLERANCE = {
    "float32": {"atol": 1e-4, "rtol": 1e-4},
    "float16": {"atol": 1e-3, "rtol": 1e-3},
    "bfloat16": {"atol": 1e-2, "rtol": 1.6e-2},
    "int32": {"atol": 0.0, "rtol": 0.0},
    "int64": {"atol": 0.0, "rtol": 0.0},
    "complex64": {"atol": 1e-4, "rtol": 1e-4},    # float32 parts: float32's default
}
HARNESS_REQUIRED = ("inputs", "cost")
TINY = "tiny"


class ProblemError(Exception):
    """A problem folder is malformed. str() is one line naming the file and what is wrong."""

    def __init__(self, path: Path, what: str):
        super().__init__(f"{path}: {what}")
        self.path = path
        self.what = what


@dataclass(frozen=True)
class Problem:
    root: Path                 # the problems/ directory the id is relative to
    path: Path                 # the problem folder
    title: str
    description: str
    category: str
    parallelism: tuple
    difficulty: str | None          # None: a source without difficulty levels (PKB)
    libraries: tuple
    world_sizes: tuple
    devices: tuple
    dtype: str
    sizes: dict                # name -> dict, in yaml order
    forbid: tuple
    inplace: bool
    tolerance: dict
    timeout_s: float | None
    cpu_note: str | None
    no_cpu_candidate: str | None   # why no candidate but the reference can run on CPU (gloo), if so
    solutions: dict = field(default_factory=dict)   # name -> {"path": Path, "devices": tuple}
    kind: str = "rewrite"
    metric: str = "time"
    template: str | None = None    # native: the template's file name (shown to models)
    build: dict | None = None      # native: the hidden build recipe (native.build.Recipe)
    protected: tuple = ()          # more folders candidates may not touch (a PKB item: its checkout's files)
    family: str | None = None      # near-duplicate variants share one (metrics.family_weighted)
    unscored: str | None = None    # why its speedup stays out of the speed aggregates, if it does
    nodes: int = 1                 # the fewest nodes its ranks must span (multi-node problems: 2)
    busbw: str | None = None       # nccl-tests' collective whose bus factor applies (spec/bandwidth.py)
    scale: bandwidth.Scale | None = None   # the size field that scales, in elements (bytes per size, sweeps)
    shared_device: dict | None = None   # why it cannot run with ranks sharing a GPU, if so (spec/shared.py)
    baselines: dict = field(default_factory=dict)   # name -> {"path", "devices", "label"} (spec/baselines.py)
    reference_label: str | None = None  # what the reference is (e.g. NCCL), as the per-size view names it

    @property
    def kind_spec(self) -> Kind:
        """What this problem's kind does at each stage (spec/kinds.py)."""
        return KINDS[self.kind]

    @property
    def id(self) -> str:
        return self.path.relative_to(self.root).as_posix()

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def reference_path(self) -> Path:
        return self.path / "reference.py"

    @property
    def template_path(self) -> Path:
        return self.path / (self.template or "")

    @property
    def harness_path(self) -> Path:
        return self.path / "harness.py"

    @property
    def markers(self) -> list[str]:
        names = [self.category, self.difficulty, *self.parallelism, *self.libraries]
        return list(dict.fromkeys(n for n in names if n))


def _need(data: dict, key: str, path: Path, kind: type | tuple[type, ...],
          choices: Collection[str] | None = None) -> Any:
    if key not in data:
        raise ProblemError(path, f"missing field '{key}'")
    value = data[key]
    if not isinstance(value, kind):
        raise ProblemError(path, f"field '{key}' must be {_kind_name(kind)}, got {type(value).__name__} {value!r}")
    if choices is not None and value not in choices:
        raise ProblemError(path, f"field '{key}' is {value!r}; expected one of {', '.join(choices)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({str: "a string", list: "a list", dict: "a mapping", bool: "true/false",
                        int: "an integer", float: "a number"}.get(k, k.__name__) for k in kinds)


def _list_of(data: dict, key: str, path: Path, choices: Collection[str], allow_empty: bool = True) -> tuple:
    values = _need(data, key, path, list)
    if not values and not allow_empty:
        raise ProblemError(path, f"field '{key}' must not be empty")
    for v in values:
        if v not in choices:
            raise ProblemError(path, f"field '{key}' has {v!r}; expected any of {', '.join(map(str, choices))}")
    return tuple(values)


def harness_functions(harness_path: Path) -> set[str]:
    """Top-level function names in harness.py, found by parsing (never importing) it."""
    try:
        tree = ast.parse(harness_path.read_text(), filename=str(harness_path))
    except SyntaxError as e:
        raise ProblemError(harness_path, f"syntax error at line {e.lineno}: {e.msg}") from None
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def load_problem(yaml_path: Path, root: Path) -> Problem:
    yaml_path = Path(yaml_path)
    folder = yaml_path.parent
    try:
        data = yaml.safe_load(yaml_path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ProblemError(yaml_path, f"invalid YAML{where}: {getattr(e, 'problem', e)}") from None
    if not isinstance(data, dict):
        raise ProblemError(yaml_path, "must be a mapping of fields")
    p = yaml_path
    title = _need(data, "title", p, str)
    description = _need(data, "description", p, str)
    if not description.strip():
        raise ProblemError(p, "field 'description' must not be empty")
    category = _need(data, "category", p, str, CATEGORIES)
    if folder.parent.name != category:
        raise ProblemError(p, f"field 'category' is {category!r} but the problem lives under "
                              f"{folder.parent.name}/ (move it to problems/{category}/{folder.name}/)")
    parallelism = _list_of(data, "parallelism", p, PARALLELISMS)
    difficulty = _need(data, "difficulty", p, str, DIFFICULTIES)
    libraries = _list_of(data, "libraries", p, LIBRARIES)
    world_sizes = _need(data, "world_sizes", p, list)
    if not world_sizes or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in world_sizes):
        raise ProblemError(p, f"field 'world_sizes' must be a non-empty list of positive integers, got {world_sizes!r}")
    devices = _list_of(data, "devices", p, DEVICES, allow_empty=False)
    dtype = _need(data, "dtype", p, str, DTYPES)
    sizes = _need(data, "sizes", p, dict)
    if TINY not in sizes:
        raise ProblemError(p, "field 'sizes' must define 'tiny' (the CPU/CI size)")
    for name, cfg in sizes.items():
        if not isinstance(cfg, dict):
            raise ProblemError(p, f"field 'sizes.{name}' must be a mapping, got {cfg!r}")
    forbid = _list_of(data, "forbid", p, FORBID_FAMILIES) if "forbid" in data else ()
    inplace = _need(data, "inplace", p, bool) if "inplace" in data else False
    tolerance = dict(DEFAULT_TOLERANCE[dtype])
    if "tolerance" in data:
        tol = _need(data, "tolerance", p, dict)
        for k, v in tol.items():
            if k not in ("atol", "rtol") or not isinstance(v, (int, float)) or v < 0:
                raise ProblemError(p, f"field 'tolerance.{k}' must be atol/rtol with a number >= 0, got {v!r}")
            tolerance[k] = float(v)
    timeout_s = None
    if "timeout_s" in data:
        timeout_s = _need(data, "timeout_s", p, (int, float))
        if timeout_s <= 0:
            raise ProblemError(p, f"field 'timeout_s' must be > 0, got {timeout_s!r}")
    cpu_note = data.get("cpu_note")
    no_cpu = data.get("no_cpu_candidate")
    if no_cpu is not None and (not isinstance(no_cpu, str) or not no_cpu.strip()):
        raise ProblemError(p, f"field 'no_cpu_candidate' must be a sentence saying why, got {no_cpu!r}")
    if "cpu" in devices and {"collectives", "p2p"} <= set(forbid) and not no_cpu:
        # gloo's only transports are collectives and p2p: forbidding both leaves a CPU candidate
        # nothing legal to call, and the item must say so rather than fail every candidate
        raise ProblemError(p, "forbids collectives and p2p, so no candidate can communicate on CPU (gloo): "
                              "add 'no_cpu_candidate: <why>' (non-reference candidates then skip on CPU)")
    family = data.get("family")
    if family is not None and (not isinstance(family, str) or not family.replace("_", "").isalnum()
                               or not family.islower()):
        raise ProblemError(p, f"field 'family' must be a lower-case name (letters, digits, _), got {family!r}")
    unscored = data.get("unscored")
    if unscored is not None and (not isinstance(unscored, str) or not unscored.strip()):
        raise ProblemError(p, f"field 'unscored' must be a sentence saying why, got {unscored!r}")
    nodes = _need(data, "nodes", p, int) if "nodes" in data else 1
    if isinstance(nodes, bool) or nodes < 1:
        raise ProblemError(p, f"field 'nodes' must be an integer >= 1 (the fewest nodes the ranks span), got {nodes!r}")
    if nodes > 1 and not any(w % nodes == 0 and w >= 2 * nodes for w in world_sizes):
        # the point of a multi-node problem is the inter-node path next to the intra-node one
        raise ProblemError(p, f"field 'nodes' is {nodes}: some world size must split into {nodes} nodes of "
                              f">= 2 ranks each (world_sizes: {world_sizes})")
    try:
        shared_device = shared.parse(data.get("shared_device"))
    except shared.SharedDeviceError as e:
        raise ProblemError(p, str(e)) from None
    known = {"shared_device", "title", "description", "category", "parallelism", "difficulty", "libraries", "world_sizes",
             "devices", "dtype", "sizes", "forbid", "inplace", "tolerance", "timeout_s", "cpu_note",
             "no_cpu_candidate", "solutions", "kind", "template", "metric", "build", "family", "unscored",
             "nodes", "busbw", "scale", "baselines", "reference_label"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ProblemError(p, f"unknown field '{unknown[0]}' (known: {', '.join(sorted(known))})")

    try:
        busbw, scale = bandwidth.parse(data, dtype, sizes)
    except bandwidth.DeclarationError as e:
        raise ProblemError(p, str(e)) from None

    try:
        declared, reference_label = baselines.parse(data, folder, devices)
    except baselines.BaselineError as e:
        raise ProblemError(p, str(e)) from None

    if not (folder / "reference.py").is_file():
        raise ProblemError(folder / "reference.py", "missing (every problem needs a reference solution())")
    if not (folder / "harness.py").is_file():
        raise ProblemError(folder / "harness.py", "missing (every problem needs inputs() and cost())")
    found = harness_functions(folder / "harness.py")
    for fn in HARNESS_REQUIRED:
        if fn not in found:
            raise ProblemError(folder / "harness.py", f"missing function '{fn}()'")
    try:
        ref_tree = ast.parse((folder / "reference.py").read_text())
    except SyntaxError as e:
        raise ProblemError(folder / "reference.py", f"syntax error at line {e.lineno}: {e.msg}") from None
    if "solution" not in {n.name for n in ref_tree.body if isinstance(n, ast.FunctionDef)}:
        raise ProblemError(folder / "reference.py", "missing function 'solution()'")

    kind = _need(data, "kind", p, str, tuple(KINDS)) if "kind" in data else "rewrite"
    metric = _need(data, "metric", p, str, METRICS) if "metric" in data else "time"
    for other in KINDS.values():        # a field of another kind is a mistake worth naming
        for key in other.fields:
            if key in data and key not in KINDS[kind].fields:
                raise ProblemError(p, f"field '{key}' belongs to {other.name} problems (add 'kind: {other.name}')")
    template, build, solutions = LOADERS[kind](folder, data, devices, forbid, found, p)
    return Problem(root=Path(root), path=folder, title=title, description=description, category=category,
                   parallelism=parallelism, difficulty=difficulty, libraries=libraries,
                   world_sizes=tuple(sorted(world_sizes)), devices=devices, dtype=dtype, sizes=dict(sizes),
                   forbid=forbid, inplace=inplace, tolerance=tolerance, timeout_s=timeout_s,
                   cpu_note=cpu_note, no_cpu_candidate=no_cpu.strip() if no_cpu else None, solutions=solutions,
                   kind=kind, metric=metric, template=template, build=build, family=family,
                   unscored=unscored.strip() if unscored else None, nodes=nodes, busbw=busbw, scale=scale,
                   shared_device=shared_device, baselines=declared, reference_label=reference_label)


def _solutions(folder: Path, declared: dict, devices: tuple, p: Path) -> dict:
    if not isinstance(declared, dict):
        raise ProblemError(p, "field 'solutions' must be a mapping name -> {devices: [...]}")
    found = {f.stem: f for f in sorted((folder / "solutions").glob("*.py"))} if (folder / "solutions").is_dir() else {}
    out = {}
    for name, cfg in declared.items():
        if name not in found:
            raise ProblemError(p, f"field 'solutions.{name}' names solutions/{name}.py, which does not exist")
        cfg = cfg or {}
        devs = cfg.get("devices", list(devices))
        bad = [d for d in devs if d not in DEVICES]
        if bad:
            raise ProblemError(p, f"field 'solutions.{name}.devices' has {bad[0]!r}; expected any of cpu, cuda")
        out[name] = {"path": found[name], "devices": tuple(devs)}
    for name, path in found.items():
        out.setdefault(name, {"path": path, "devices": tuple(devices)})
    return out


def _rewrite(folder: Path, data: dict, devices: tuple, forbid: tuple, harness_fns: set, p: Path):
    """A rewrite problem's own parts: its shipped solutions/*.py (no template, no build)."""
    return None, None, _solutions(folder, data.get("solutions") or {}, devices, p)


def _native(folder: Path, data: dict, devices: tuple, forbid: tuple, harness_fns: set, p: Path):
    """A native problem's template, recipe and shipped fill (solution<suffix>), checked: the markers
    pair up and the shipped fill splices into the template (a broken exemplar fails collection)."""
    from ..native.regions import EditError, MarkerError, parse, splice
    from ..native.toolchain import LINKABLE, SUFFIX
    if forbid:
        raise ProblemError(p, "field 'forbid' does not apply to native problems: what region code may use is "
                              "the build recipe's libraries and headers")
    if "solutions" in data:
        raise ProblemError(p, "field 'solutions' does not apply to native problems: the shipped fill is solution.cu/.cpp")
    build = _need(data, "build", p, dict)
    unknown = sorted(set(build) - {"compiler", "flags", "libraries", "headers", "asm"})
    if unknown:
        raise ProblemError(p, f"unknown field 'build.{unknown[0]}' (known: asm, compiler, flags, headers, libraries)")
    compiler = _need(build, "compiler", p, str, tuple(SUFFIX))
    for key in ("flags", "libraries", "headers"):
        value = build.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ProblemError(p, f"field 'build.{key}' must be a list of strings, got {value!r}")
    bad = [lib for lib in build.get("libraries", []) if lib not in LINKABLE]
    if bad:
        raise ProblemError(p, f"field 'build.libraries' has {bad[0]!r}; expected any of {', '.join(LINKABLE)}")
    if not isinstance(build.get("asm", False), bool):
        raise ProblemError(p, "field 'build.asm' must be true/false")
    template = _need(data, "template", p, str)
    suffix = SUFFIX[compiler]
    if Path(template).name != template or not template.endswith(suffix):
        raise ProblemError(p, f"field 'template' must name a {suffix} file in the problem folder (compiler {compiler})")
    tpath, spath = folder / template, folder / f"solution{suffix}"
    for path in (tpath, spath):
        if not path.is_file():
            raise ProblemError(path, "missing (a native problem needs its template and the filled solution)")
    try:
        if not parse(tpath.read_text(), template).order:
            raise ProblemError(tpath, "has no edit region (// >>> EDIT name ... // <<< EDIT name)")
        splice(tpath.read_text(), spath.read_text(), template)
    except (MarkerError, EditError) as e:
        raise ProblemError(spath if isinstance(e, EditError) else tpath, str(e)) from None
    glue = folder / "glue.py"
    if not glue.is_file():
        raise ProblemError(glue, "missing (a native problem's glue: native_setup/native_call, run in the candidate's "
                                 "process, apart from the hidden harness the checker runs)")
    if "native_call" not in harness_functions(glue):
        raise ProblemError(glue, "missing function 'native_call()' (the glue of a native problem)")
    return template, dict(build), {"solution": {"path": spath, "devices": tuple(devices)}}


# each kind's own problem.yaml parts (spec/kinds.py): (template, build, solutions)
LOADERS = {"rewrite": _rewrite, "native": _native}


def size_names(problem: Problem, device: str, requested: list[str] | None) -> list[str]:
    """Which sizes run: the ones asked for, else tiny on CPU and every other size on CUDA."""
    if requested:
        return [s for s in requested if s in problem.sizes]
    if device == "cpu":
        return [TINY]
    gpu = [s for s in problem.sizes if s != TINY]
    return gpu or [TINY]


@dataclass
class Placement:
    """Where one item runs: its device, world size and the sizes it runs (session.place decides)."""
    device: str
    world_size: int
    sizes: list
    swept: dict = field(default_factory=dict)     # --kb-sweep: name -> config of each swept size
    shared: bool = False       # --kb-oversubscribe: its ranks share fewer GPUs than W (correctness only)

    def config(self, problem: Problem, name: str) -> dict:
        """A size's config: a swept one's, else problem.yaml's."""
        return self.swept[name] if name in self.swept else problem.sizes[name]
