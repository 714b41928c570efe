"""The cheap stages of a candidate that need no rank (pytest process, stdlib only; the candidate's
code is parsed, never run): syntax, the NVLink multicast scan, whether it needs CUDA, and the
forbidden APIs its source calls (the census counts them; the ranks' guards decide).

On a CPU machine most PKB items are CUDA only: these stages still run for them, so a CPU run says
which candidates are missing, do not parse or would be refused as unsafe before any GPU is used.
"""
from __future__ import annotations

import ast
import importlib.util
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from ..candidates import safety
from ..candidates.files import python_syntax
from ..protocol import Failure

if TYPE_CHECKING:
    from ..candidates import Candidate

# what makes a candidate CUDA only, in the order they are named
NEEDS_CUDA = (
    (re.compile(r"\b(compile_cuda_extension|load_inline|cpp_extension\.load)\s*\("), "builds a CUDA extension"),
    (re.compile(r"^\s*(import|from)\s+triton\b", re.MULTILINE), "uses Triton"),
    (re.compile(r"\b(parallelkittens_runtime|kittens)\b"), "uses ParallelKittens"),
    (re.compile(r"\b_symmetric_memory\b|\bsymm_mem\b"), "uses torch symmetric memory"),
    (re.compile(r"\btorch\.cuda\.(?!is_available\b)\w+|\.cuda\("), "uses CUDA devices"),
)
# torch.distributed collectives (rank/guards.py's COLLECTIVE_FUNCS, which the ranks enforce)
COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "all_gather_coalesced", "_all_gather_base", "all_gather_single", "reduce_scatter", "reduce_scatter_tensor",
    "reduce_scatter_single", "_reduce_scatter_base", "all_to_all", "all_to_all_single", "broadcast",
    "broadcast_object_list", "reduce", "gather", "gather_object", "scatter", "scatter_object_list", "barrier",
    "monitored_barrier"})
DIST_NAMES = ("dist", "distributed", "c10d", "distributed_c10d")


def multicast(source: str) -> str | None:
    return safety.scan(source)


def verdict(candidate: Candidate, allow_multicast: bool = False) -> tuple[str, str] | None:
    """(category, message) when the candidate fails before any rank would run it."""
    if candidate.failure:
        return candidate.failure
    if candidate.is_reference or candidate.source is None:
        return None
    bad = python_syntax(candidate.source, candidate.origin or "solution.py")
    if bad:
        return bad
    found = None if allow_multicast else multicast(candidate.source)
    return (Failure.UNSAFE, found) if found else None


def needs_cuda(source: str | None) -> str | None:
    """Why the candidate runs only on CUDA (its code builds CUDA or Triton kernels, uses symmetric
    memory or CUDA devices), or None."""
    for pattern, what in NEEDS_CUDA:
        m = pattern.search(source or "")
        if m:
            line = (source or "").count("\n", 0, m.start()) + 1
            return f"needs CUDA: the candidate {what} ({m.group(0).strip()!r} at line {line})"
    return None


# torch.distributed's object collectives unpack with numpy, which torch does not require
NUMPY_CALLS = frozenset({"all_gather_object", "gather_object", "broadcast_object_list", "scatter_object_list"})


def missing_modules(source: str, beside: Path) -> str | None:
    """Why a reference cannot run in this Python: a module it imports (or numpy, for torch's object
    collectives it calls) is not installed. Not the candidate's failure: the item skips saying so.
    Modules of the checkout itself (`beside`: its root, PKB's utils/) are PKB's own."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    wanted: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            wanted.update((a.name.split(".")[0], "imports it") for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            wanted.setdefault(node.module.split(".")[0], "imports it")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in NUMPY_CALLS:
            wanted.setdefault("numpy", f"calls {node.func.attr}, which torch unpacks with numpy")
    for name, why in wanted.items():
        if (beside / name).exists() or (beside / f"{name}.py").exists():
            continue
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return (f"the reference needs {name} ({why}), which this Python lacks: pip install {name} "
                    "(not the candidate's failure)")
    return None


def forbidden_calls(source: str) -> Counter:
    """Collectives the source calls as <dist>.<name>(...) (dist, torch.distributed, c10d), by name."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return Counter()
    found: Counter = Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in COLLECTIVES:
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else ""
            if name in DIST_NAMES:
                found[node.func.attr] += 1
    return found
