"""Candidates from files: the reference itself, a shipped solution, or a directory of kernels."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..pkb.checkout import candidate_file as pkb_candidate_file
from ..pkb.checkout import is_pkb, reference_origin
from ..protocol import Failure
from . import Candidate

if TYPE_CHECKING:
    from ..spec.problem import Problem

MODES = ("auto", "reference", "shipped")


class CandidateError(Exception):
    """The user asked for a candidate that does not exist; str() is one line."""


class NoCandidate(Exception):
    """Nothing to run for this item on this hardware (the item is skipped with this reason)."""


def parse_mode(value: str) -> tuple[str, str | None]:
    mode, _, name = value.partition(":")
    if mode not in MODES or (name and mode != "shipped"):
        raise CandidateError(f"--kb-candidate={value!r}: expected auto, reference, shipped or shipped:NAME")
    return mode, name or None


def reference(problem: Problem) -> Candidate:
    origin = reference_origin(problem) if is_pkb(problem) else str(problem.reference_path)
    return Candidate("reference", "self-check", problem.reference_path.read_text(), origin=origin, is_reference=True)


def shipped(problem: Problem, device: str, name: str | None, strict: bool) -> Candidate | None:
    """A shipped solution that runs on `device` (the named one, else the first by name)."""
    options = problem.solutions
    if name is not None:
        if name not in options:
            known = ", ".join(sorted(options)) or "none"
            raise CandidateError(f"{problem.path}/solutions/{name}.py does not exist (shipped: {known})")
        picks = [name]
    else:
        picks = sorted(options)
    for n in picks:
        if device in options[n]["devices"]:
            path = options[n]["path"]
            return Candidate("shipped", f"shipped:{n}", path.read_text(), origin=str(path))
    if strict:
        what = f"solutions/{name}.py does not run" if name else "no shipped solution runs"
        raise NoCandidate(f"{what} on {device}")
    return None


def from_directory(problem: Problem, directory: Path, pkb_backend: str = "cuda") -> Candidate:
    # a native problem's candidate is its template's language: the whole file or only the regions
    suffix = problem.kind_spec.suffix(problem.template)
    path = Path(directory) / problem.category / f"{problem.name}{suffix}"
    expected = f"<dir>/{problem.category}/{problem.name}{suffix}"
    origin, meta, given = str(path), {}, str(directory)
    if is_pkb(problem):         # ParallelKernelBench's layout: <dir>/<N>_<name>_<backend>.py (pkb/pairing.py)
        path, how = pkb_candidate_file(problem, directory, pkb_backend)
        expected = f"<dir>/{path.name}"
        origin = f"{Path(directory).name}/{path.name}"      # records carry no path of this machine
        meta, given = ({"paired_by": how} if how else {}), Path(directory).name
    label = f"dir:{Path(directory).name}"
    if not path.is_file():
        # a failure of this candidate set (no_code), counted like any other, never an error
        return Candidate("dir", label, None, origin=origin, failure=(
            Failure.NO_CODE, f"{origin}: no candidate for {problem.id} in --kb-solutions={given} "
                       f"(expected {expected})"))
    source = path.read_text()
    return Candidate("dir", label, source, origin=origin, meta=meta,
                     failure=python_syntax(source, origin) if suffix == ".py" else None)


def python_syntax(source: str, path: Path | str) -> tuple[str, str] | None:
    """A Python candidate that does not parse fails here, before any rank starts, naming the
    user's own file and line (not the job folder's copy)."""
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as e:
        where = f"{path}:{e.lineno}" + (f":{e.offset}" if e.offset else "")
        line = f"\n    {e.text.rstrip()}" if e.text and e.text.strip() else ""
        return (Failure.COMPILE_ERROR, f"{where}: {type(e).__name__}: {e.msg}{line}")
    except (ValueError, RecursionError, MemoryError) as e:     # null bytes, nesting too deep
        return (Failure.COMPILE_ERROR, f"{path}: {type(e).__name__}: {e}")
    return None


def choose(problem: Problem, device: str, mode_value: str, solutions_dir: str | None, pkb_backend: str = "cuda") -> Candidate:
    if solutions_dir:
        return from_directory(problem, Path(solutions_dir), pkb_backend)
    mode, name = parse_mode(mode_value)
    if mode == "reference":
        return reference(problem)
    if mode == "shipped":
        found = shipped(problem, device, name, strict=True)
        assert found is not None, "strict: shipped() raises NoCandidate rather than return None"
        return found
    return shipped(problem, device, None, strict=False) or reference(problem)
