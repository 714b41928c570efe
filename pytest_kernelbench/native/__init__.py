"""The native kind of problem (problems/NATIVE.md): a C++/CUDA template with edit regions, a
hidden build recipe, and glue (glue.py) that plugs the built library into the solution()
contract. This package is the pytest side (standard library + filelock): splice and check a
candidate's text, scan its regions, build it, and check what the library links (symbols.py). The rank side is rank/native.py; helpers for the
glue are in native/glue.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..protocol import Failure
from . import build, symbols
from .build import Recipe, Unavailable
from .regions import EditError, splice
from .scan import scan

if TYPE_CHECKING:
    from ..spec.problem import Problem


@dataclass
class Prepared:
    """A candidate's text made into a library, or the reason it was not."""
    lib: str | None = None
    source: str | None = None                # the spliced file that was built
    failure: tuple[Failure, str] | None = None     # (category, message)
    error: str | None = None                 # not the candidate's fault (no compiler, no library)
    build: dict = field(default_factory=dict)


def prepare(problem: Problem, text: str, cache_dir: Path, timeout_s: float) -> Prepared:
    template = problem.template_path.read_text()
    name = problem.template_path.name
    try:
        spliced = splice(template, text, name)
    except EditError as e:
        return Prepared(failure=(Failure.EDIT_OUTSIDE_REGION, str(e)))
    recipe = Recipe.of(problem.build, problem.id)
    found = scan(spliced.regions, recipe.headers, recipe.asm)
    if found:
        return Prepared(source=spliced.source, failure=(Failure.FORBIDDEN_CONSTRUCT, found))
    try:
        res = build.build(spliced.source, recipe, cache_dir, name, spliced.linemap, timeout_s)
    except Unavailable as e:
        return Prepared(source=spliced.source, error=f"cannot build {name} on this machine: {e}")
    info = {"s": round(res.seconds, 3), "cached": res.cached, "key": res.key, "mode": spliced.mode}
    if not res.ok:
        return Prepared(source=spliced.source, build=info, failure=(Failure.COMPILE_ERROR, f"building {name}:\n{res.message}"))
    assert res.lib is not None
    refused = linked_beyond_recipe(problem, recipe, res.lib, cache_dir, timeout_s)
    if refused:
        return Prepared(source=spliced.source, build=info, failure=(Failure.FORBIDDEN_CONSTRUCT, (
            f"the built library calls {', '.join(refused[:6])}{' and more' if len(refused) > 6 else ''}: not in "
            f"what the recipe links ({', '.join(recipe.libraries) or 'the C/C++ runtime only'}) nor what the "
            "template's fixed part uses")))
    return Prepared(lib=res.lib, source=spliced.source, build=info)


def linked_beyond_recipe(problem: Problem, recipe: Recipe, lib: str, cache_dir: Path, timeout_s: float) -> list[str]:
    """The dynamic symbols the candidate's library needs that the recipe does not allow; the
    allowance comes from the problem's own shipped fill, built with the same recipe (cached)."""
    shipped = problem.path / f"solution{problem.template_path.suffix}"
    expert: set[str] = set()
    try:
        res = build.build(shipped.read_text(), recipe, cache_dir, problem.template_path.name, None, timeout_s)
        if res.ok and res.lib:
            expert = symbols.undefined_symbols(res.lib)
    except (OSError, Unavailable, ValueError):
        pass
    try:
        return symbols.refused(lib, recipe.libraries, expert)
    except (OSError, ValueError) as e:
        return [f"(an unreadable library: {e})"]


__all__ = ["Prepared", "prepare", "Recipe", "EditError", "Unavailable", "splice", "scan", "build"]   # build: the module
