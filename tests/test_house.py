"""The package's house rules (issue 25): stages that read as the pipeline, imports that only go
down it, no import cycle, and a rank side that stands on the vocabulary alone. Every import counts:
module level, deferred (inside a function) and type-only (under TYPE_CHECKING), because each of
them is a dependency a reader has to follow."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from kbrun import REPO

PACKAGE = REPO / "pytest_kernelbench"
SKIP = ("pytest_kernelbench.templates",)      # files shown to models, not modules of the package

# the pipeline, bottom up: a module may import its own stage and the stages below it, never above
STAGES = [
    ("vocabulary", ("pytest_kernelbench", "pytest_kernelbench.protocol", "pytest_kernelbench.procs",
                    "pytest_kernelbench.options", "pytest_kernelbench.harnesslib")),
    ("spec", ("pytest_kernelbench.spec", "pytest_kernelbench.native.regions", "pytest_kernelbench.native.scan",
              "pytest_kernelbench.native.symbols", "pytest_kernelbench.native.toolchain",
              "pytest_kernelbench.pkb.taxonomy", "pytest_kernelbench.pkb.adapter", "pytest_kernelbench.pkb.eligibility",
              "pytest_kernelbench.pkb.pairing", "pytest_kernelbench.pkb.checkout", "pytest_kernelbench.pkb.shim",
              "pytest_kernelbench.pkb")),
    ("candidates", ("pytest_kernelbench.candidates", "pytest_kernelbench.native.prompt", "pytest_kernelbench.pkb.static")),
    ("launch", ("pytest_kernelbench.native", "pytest_kernelbench.launch")),
    ("rank", ("pytest_kernelbench.rank",)),
    ("outcome", ("pytest_kernelbench.outcome",)),
    ("metrics", ("pytest_kernelbench.metrics",)),
    ("report", ("pytest_kernelbench.report",)),
    ("pytest face", ("pytest_kernelbench.plugin", "pytest_kernelbench.collect", "pytest_kernelbench.fixtures", "pytest_kernelbench.testcase",
                     "pytest_kernelbench.run", "pytest_kernelbench.session", "pytest_kernelbench.hookspec")),
    # the other face of one item's run (evaluate(), batches, the service): KBSession.run_item without pytest
    ("scoring", ("pytest_kernelbench.scoring",)),
    # reports read back, and the commands that drive the faces (kernelbench try, serve)
    ("cli", ("pytest_kernelbench.cli",)),
]
# what the rank side (a separate, partly sandboxed process) may import of the package
RANK_FLOOR = ("pytest_kernelbench.protocol", "pytest_kernelbench.procs")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {m: p for m, p in found.items() if not m.startswith(SKIP)}


def imports(path: Path, known: set[str]) -> set[str]:
    """Every module of the package that `path` imports, wherever the import statement is."""
    mod = module_name(path)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("pytest_kernelbench"):
                continue
            for alias in node.names:      # `from . import x` imports the module x
                full = f"{target}.{alias.name}"
                found.add(full if full in known else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name not in known and "." in name:
                    name = name.rsplit(".", 1)[0]
                if name.startswith("pytest_kernelbench"):
                    found.add(name)
    found.discard(mod)
    return {t for t in found if t in known}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(p, set(mods)) for m, p in mods.items()}


def stage_of(module: str) -> int:
    best, where = -1, None
    for i, (_, prefixes) in enumerate(STAGES):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, where = len(prefix), i
    assert where is not None, f"{module} belongs to no stage: add it to STAGES (and docs/package.md)"
    return where


def test_every_module_has_a_stage():
    for m in modules():
        stage_of(m)


def test_no_import_cycle_counting_deferred_and_type_only_imports():
    g = graph()
    state: dict[str, str] = {}
    stack: list[str] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))

    def visit(m: str) -> None:
        state[m] = "open"
        stack.append(m)
        for t in sorted(g[m]):
            if state.get(t) == "open":
                cycle = stack[stack.index(t):] + [t]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_imports_go_down_the_pipeline():
    back = [f"{m} ({STAGES[stage_of(m)][0]}) -> {t} ({STAGES[stage_of(t)][0]})"
            for m, targets in graph().items() for t in sorted(targets) if stage_of(t) > stage_of(m)]
    assert not back, "imports against the data flow:\n  " + "\n  ".join(back)


def test_the_rank_side_imports_only_the_vocabulary():
    """The ranks (checker and candidate process) import protocol and procs of the package, nothing
    of the pytest side: what runs next to a candidate stays small and reviewable."""
    bad = [f"{m} -> {t}" for m, targets in graph().items() if m.startswith("pytest_kernelbench.rank")
           for t in sorted(targets) if not t.startswith("pytest_kernelbench.rank") and t not in RANK_FLOOR]
    assert not bad, "\n".join(bad)


def test_the_rules_see_deferred_and_type_only_imports(tmp_path):
    """The import reader itself: a function-level and a TYPE_CHECKING import count."""
    src = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..session import KBSession\n"
           "def f():\n    from ..metrics import roofline\n")
    path = PACKAGE / "candidates" / "_probe_for_test.py"
    known = set(modules()) | {"pytest_kernelbench.candidates._probe_for_test"}
    try:
        path.write_text(src)
        assert imports(path, known) == {"pytest_kernelbench.session", "pytest_kernelbench.metrics.roofline"}
    finally:
        path.unlink()


def house_section() -> str:
    text = (REPO / "docs" / "package.md").read_text()
    start = text.index("## The package, stage by stage")
    end = text.find("\n## ", start + 3)
    return text[start:] if end < 0 else text[start:end]


def test_docs_package_names_every_module_in_its_stage_section():
    """docs/package.md's house section is written from the import graph: a new module gets its line
    there (by path under pytest_kernelbench/; a folder ending in / covers what is inside it)."""
    section = house_section()
    named = set(re.findall(r"`([a-z0-9_/]+(?:\.py|/))`", section))
    missing = []
    for path in sorted(modules().values()):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in named or any(n.endswith("/") and rel.startswith(n) for n in named):
            continue
        missing.append(rel)
    assert not missing, "modules docs/package.md's 'The package, stage by stage' does not name: " + ", ".join(missing)
    stale = sorted(n for n in named if not (PACKAGE / n).exists())
    assert not stale, "docs/package.md's house section names modules that do not exist: " + ", ".join(stale)
