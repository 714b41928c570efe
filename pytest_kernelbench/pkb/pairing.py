"""Which file of a folder of ParallelKernelBench candidates (`--kb-solutions`, PKB's layout
<N>_<name>_<backend>.py) is the candidate for which reference of the checkout.

A file named after the reference's stem pairs with it. Failing that, a file named in the layout of
PKB's published model solutions (the five solutions_* folders of its first commit, dab0830) pairs
with the reference it was written for: those folders use an older numbering than any commit's
references, in which 11, 12, 14 and 18 have other names (RENAMED) and 34-88 are references 33-87
shifted by one (no folder has a 33). Names alone would pair wrongly (the published
12_gemm_allgather is reference 12_allgather_gemm, not 14_gemm_allgather), so the shift applies
only to the names PKB's references are known by (taxonomy.TAXONOMY). Every other file pairs with
no reference and is reported, never silently dropped.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .taxonomy import TAXONOMY

# published solution stem -> the reference stem it solves (besides the shift of 34-88)
RENAMED = {"11_gemm_allgather_AT": "11_allgather_gemm_AT", "12_gemm_allgather": "12_allgather_gemm",
           "14_gemm_allscatter": "14_gemm_allgather", "18_rms_norm": "18_tp_rms_norm"}
SHIFT_FROM = 34          # published 34-88 are references 33-87
STEM = re.compile(r"^(\d+)_(\w+)$")
EXACT, PUBLISHED = "exact", "published layout"


def published_target(stem: str) -> str | None:
    """The reference stem a file stem names in PKB's published layout, if it names one."""
    if stem in RENAMED:
        return RENAMED[stem]
    m = STEM.match(stem)
    if m and int(m.group(1)) >= SHIFT_FROM:
        target = f"{int(m.group(1)) - 1}_{m.group(2)}"
        return target if target in TAXONOMY else None
    return None


def published_names(reference: str) -> list[str]:
    """The published-layout stems that pair with `reference`."""
    names = [k for k, v in RENAMED.items() if v == reference]
    m = STEM.match(reference)
    if m and reference in TAXONOMY and int(m.group(1)) + 1 >= SHIFT_FROM:
        names.append(f"{int(m.group(1)) + 1}_{m.group(2)}")
    return names


def candidate_file(directory: str | os.PathLike[str], backend: str, reference: str) -> tuple[Path, str | None]:
    """(the file for `reference`, how it paired: EXACT, PUBLISHED, or None when there is none; then
    the path is the file that was expected)."""
    exact = Path(directory) / f"{reference}_{backend}.py"
    if exact.is_file():
        return exact, EXACT
    for name in published_names(reference):
        path = Path(directory) / f"{name}_{backend}.py"
        if path.is_file():
            return path, PUBLISHED
    return exact, None


@dataclass
class Pairing:
    """A folder against a checkout's references."""
    exact: dict[str, str] = field(default_factory=dict)        # reference stem -> file name
    renamed: dict[str, str] = field(default_factory=dict)      # reference stem -> file name (published layout)
    unpaired: list[str] = field(default_factory=list)          # "<file>: why", one per file

    def summary(self) -> dict:
        return {"paired": len(self.exact) + len(self.renamed), "exact": len(self.exact), "renamed": len(self.renamed),
                "unpaired": list(self.unpaired)}


def pair(directory: str | Path, backend: str, references: list[str]) -> Pairing:
    known = set(references)
    out = Pairing()
    suffix = f"_{backend}.py"
    files = sorted((p.name for p in Path(directory).glob(f"*{suffix}") if p.is_file()),
                   key=lambda n: (int(n.split("_", 1)[0]) if n.split("_", 1)[0].isdigit() else 1 << 30, n))
    stems = {name[:-len(suffix)]: name for name in files}
    for stem, name in stems.items():
        target = published_target(stem)
        if stem in known:
            out.exact[stem] = name
        elif target in known and target not in stems:
            out.renamed[target] = name
        elif target in known:
            out.unpaired.append(f"{name}: pairs with {target} in PKB's published layout, which has its own file "
                                f"{stems[target]}")
        elif target:
            out.unpaired.append(f"{name}: PKB's published layout names reference {target}, which this checkout "
                                f"does not have")
        else:
            out.unpaired.append(f"{name}: no reference {stem} in this checkout")
    return out


def header_lines(summary: dict | None) -> list[str]:
    """A Pairing.summary() (plus the folder's name) for the run's header: how the files paired, and
    every file that pairs with none."""
    if not summary:
        return []
    head = f"--kb-solutions={summary['folder']}: {summary['paired']} files pair with a reference"
    if summary["renamed"]:
        head += f" ({summary['renamed']} by the names of PKB's published solutions)"
    if not summary["unpaired"]:
        return [head]
    return [f"{head}; {len(summary['unpaired'])} pair with none (not run):", *(f"  {u}" for u in summary["unpaired"])]
