"""The task text of a native problem: the template (never solution.* nor harness.py), what is
computed, the toolchain and libraries as a programmer needs them (names and versions, never the
recipe's flags), the rules, the hardware."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..candidates.sections import calls_text, correctness_text, fill, hardware_text, inputs_text, lang_of
from .regions import parse
from .toolchain import Recipe, Unavailable, compiler_version, resolve

if TYPE_CHECKING:
    from ..spec.problem import Placement, Problem

METRIC_TEXT = {"time": "",
               "latency": " (this problem also reports latency: microseconds per call)",
               "bandwidth": " (this problem also reports bandwidth: bytes over the links per second, higher is better)"}


def toolchain(recipe: Recipe, machine: dict) -> str:
    parts = [f"{recipe.compiler} ({compiler_version(recipe.compiler) or 'version unknown'})"]
    std = next((m.group(1) for f in recipe.flags for m in [re.search(r"std=(?:c|gnu)\+\+(\d+)", f)] if m), None)
    if std:
        parts.append(f"C++{std}")
    arch = next((m for f in recipe.flags for m in [re.search(r"sm_(\d)(\d+)(a?)", f)] if m), None)
    if arch:
        parts.append(f"device code for compute capability {arch.group(1)}.{arch.group(2)}{arch.group(3)}"
                     + (" (architecture-specific features available)" if arch.group(3) else ""))
    return ", ".join(parts)


def libraries(recipe: Recipe) -> str:
    out = []
    for name in recipe.libraries:
        try:
            version = resolve(name).version
        except Unavailable:
            version = "not found on the machine that wrote this prompt"
        out.append(f"{name} ({version})" if version else name)
    return ", ".join(out) or "none beyond the C++ standard library"


def native_task_text(problem: Problem, placement: Placement, machine: dict, probed: dict | None,
                     compile_budget_s: float | None = None, deadline_s: float | None = None) -> str:
    recipe = Recipe.of(problem.build, problem.id)
    template = problem.template_path.read_text()
    asm = "Inline assembly (asm, e.g. PTX) is allowed." if recipe.asm else "Inline assembly is not allowed."
    return fill(
        "task_native.md", title=problem.title, problem_id=problem.id, description=problem.description.strip(),
        template_name=problem.template, lang=lang_of(problem), template=template.rstrip("\n"),
        regions=", ".join(parse(template).order), reference=problem.reference_path.read_text().strip(),
        world_size=placement.world_size, world_sizes=", ".join(map(str, problem.world_sizes)),
        ranks_text="one GPU per rank" if placement.device == "cuda" else "one CPU process per rank",
        dtype=problem.dtype, inputs=inputs_text(problem, placement, probed),
        calls_text=calls_text(problem, placement, compile_budget_s, deadline_s),
        correctness_text=correctness_text(problem), metric_text=METRIC_TEXT[problem.metric],
        toolchain=toolchain(recipe, machine), libraries=libraries(recipe),
        headers=", ".join(recipe.headers) or "nothing (the fixed part includes what is needed)", asm_text=asm,
        hardware=hardware_text(machine, placement, problem))
