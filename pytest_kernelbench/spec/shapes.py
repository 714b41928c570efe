"""What solution() receives, per size and rank: types, shapes and dtypes of the inputs, for the
prompt. Found by running harness.inputs() on the `meta` device (no data, no memory) in a
separate Python process, so the pytest process never imports harness code and no harness text
ever reaches a prompt: only the structure of what it returns.

    python -m pytest_kernelbench.spec.shapes < request.json > answer.json

Request: {"jobs": [{"harness": path, "sizes": {name: cfg}, "world_size": W, "dtype": "bfloat16"}]}.
Answer: {"results": [{size name: {"ranks": [[arg, ...] per rank]} or {"error": "type only"}}]},
where an arg is {"kind": "tensor", "dtype": "bfloat16", "shape": [..]} | {"kind": "int", "value": 3}
| {"kind": "float"} | {"kind": "bool", "value": true} | {"kind": "list"/"tuple", "items": [..]} |
{"kind": "<type name>"}.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..protocol import atomic_write, child_pythonpath

if TYPE_CHECKING:
    from .problem import Problem

PROBE_TIMEOUT_S = 120.0
VERSION = 1


def _describe(obj: Any, torch: ModuleType, depth: int = 0) -> dict:
    if isinstance(obj, torch.Tensor):
        return {"kind": "tensor", "dtype": str(obj.dtype).replace("torch.", ""), "shape": list(obj.shape)}
    if isinstance(obj, bool):
        return {"kind": "bool", "value": obj}
    if isinstance(obj, int):
        return {"kind": "int", "value": obj}
    if isinstance(obj, float):
        return {"kind": "float"}
    if isinstance(obj, (list, tuple)) and depth < 3:
        return {"kind": type(obj).__name__, "items": [_describe(o, torch, depth + 1) for o in obj]}
    return {"kind": type(obj).__name__}


def _probe_job(job: dict, torch: ModuleType) -> dict:
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"_kb_shapes_{os.urandom(4).hex()}", job["harness"])
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {job['harness']}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    dtype = getattr(torch, job["dtype"])
    meta = torch.device("meta")
    out: dict[str, dict] = {}
    for name, cfg in job["sizes"].items():
        try:
            ranks = []
            for rank in range(job["world_size"]):
                gen = torch.Generator()
                gen.manual_seed(rank)
                args = mod.inputs(cfg, rank, job["world_size"], gen, meta, dtype)
                if not isinstance(args, (tuple, list)):
                    args = (args,)
                ranks.append([_describe(a, torch) for a in args])
            out[name] = {"ranks": ranks}
        except Exception as e:  # data-dependent shapes cannot be traced on meta: say so, no text
            out[name] = {"error": type(e).__name__}
    return out


def main():
    import contextlib
    request = json.load(sys.stdin)
    out = sys.stdout
    results = []
    with contextlib.redirect_stdout(sys.stderr):   # whatever harness code prints stays out of the answer
        import torch
        for job in request["jobs"]:
            try:
                results.append(_probe_job(job, torch))
            except Exception as e:
                results.append({"_error": type(e).__name__})
    json.dump({"results": results}, out)


# ---- pytest-process side ------------------------------------------------------------------------
def _key(problem: Problem, world_size: int) -> str:
    h = hashlib.sha256()
    h.update(f"v{VERSION}|{problem.dtype}|{world_size}|".encode())
    h.update(json.dumps(problem.sizes, sort_keys=True, default=str).encode())
    h.update(problem.harness_path.read_bytes())
    return h.hexdigest()


def probe_many(requests: list[tuple], cache_dir: Path | None = None) -> list[dict | None]:
    """[(problem, world_size), ...] -> per request {size: {"ranks": ...} | {"error": ...}} or None
    when the probe could not run. One subprocess for all uncached requests."""
    results: list[dict | None] = [None] * len(requests)
    todo = []
    for i, (problem, w) in enumerate(requests):
        path = Path(cache_dir) / f"{_key(problem, w)}.json" if cache_dir else None
        if path is not None and path.is_file():
            try:
                results[i] = json.loads(path.read_text())
                continue
            except ValueError:
                pass
        todo.append((i, problem, w, path))
    if not todo:
        return results
    jobs = [{"harness": str(p.harness_path), "sizes": p.sizes, "world_size": w, "dtype": p.dtype} for _, p, w, _ in todo]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = child_pythonpath(env)
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest_kernelbench.spec.shapes"], input=json.dumps({"jobs": jobs}),
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env)
        answer = json.loads(proc.stdout)["results"] if proc.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        answer = None
    if answer is None:
        return results
    for (i, _, _, path), res in zip(todo, answer):
        if "_error" in res:
            continue
        results[i] = res
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(path, json.dumps(res))
            except OSError:
                pass
    return results


def probe(problem: Problem, world_size: int, cache_dir: Path | None = None) -> dict | None:
    return probe_many([(problem, world_size)], cache_dir)[0]


# ---- text ---------------------------------------------------------------------------------------
def _arg_text(a: dict) -> str:
    kind = a.get("kind")
    if kind == "tensor":
        return f"{a['dtype']} tensor [{', '.join(map(str, a['shape']))}]"
    if kind in ("int", "bool"):
        return f"{kind} = {a['value']}"
    if kind in ("list", "tuple"):
        return f"{kind} of {len(a['items'])}: (" + ", ".join(_arg_text(i) for i in a["items"][:8]) + \
            (", ..." if len(a["items"]) > 8 else "") + ")"
    return kind or "?"


def _label(i: int, names: list[str] | None, varargs: str | None) -> str:
    """Argument i by the reference's parameter names: `x`, `tensors[3]`, else `arg 3`."""
    names = names or []
    if i < len(names):
        return names[i]
    if varargs:
        return f"{varargs}[{i - len(names)}]"
    return f"arg {i}"


def _pattern(parts: list[str]) -> int | None:
    """The shortest period p of `parts` that repeats at least twice, or None."""
    for p in range(1, len(parts) // 2 + 1):
        if len(parts) % p == 0 and parts == parts[:p] * (len(parts) // p):
            return p
    return None


def _compress(parts: list[str], names: list[str] | None = None, varargs: str | None = None) -> list[str]:
    """Argument texts named by the reference's signature; a repeating pattern in *args (e.g.
    per-layer tensors) is written once, indexed by k. Without a signature: `arg i`."""
    n = len(parts)
    if names is None and varargs is None:      # no signature known: number them, fold repeats
        for start in range(0, min(3, n)):
            p = _pattern(parts[start:])
            if p is not None:
                head = [f"arg {i}: {t}" for i, t in enumerate(parts[:start])]
                return head + [f"args {start}..{n - 1}: {(n - start) // p} repetitions of "
                               f"({'; '.join(parts[start:start + p])})"]
    named = min(len(names or []), n)
    lines = [f"{_label(i, names, varargs)}: {t}" for i, t in enumerate(parts[:named])]
    rest = parts[named:]
    for start in range(0, min(3, len(rest)) if varargs else 0):
        p = _pattern(rest[start:])
        if p is None:
            continue
        lines += [f"{varargs}[{i}]: {t}" for i, t in enumerate(rest[:start])]
        reps = (len(rest) - start) // p
        if p == 1:
            return lines + [f"{varargs}[{start}] .. {varargs}[{start + reps - 1}]: each {rest[start]}"]
        return lines + [f"{varargs}[{p}k{f' + {start + j}' if start + j else ''}]: {t}"
                        for j, t in enumerate(rest[start:start + p])] + [f"(k = 0 .. {reps - 1})"]
    lines += [f"{_label(named + i, names, varargs)}: {t}" for i, t in enumerate(rest[:40])]
    if len(rest) > 40:
        lines.append(f"... and {len(rest) - 40} more arguments")
    return lines


def describe(probed: dict | None, problem: Problem, world_size: int, running: list[str],
             names: list[str] | None = None, varargs: str | None = None) -> str:
    """Markdown lines: per size, its config and what every rank receives, each argument named as
    the reference's solution() names it (names: its positional parameters; varargs: its *args)."""
    lines = []
    for name, cfg in problem.sizes.items():
        cfg_text = ", ".join(f"{k}={v}" for k, v in cfg.items())
        mark = " (runs in this evaluation)" if name in running else ""
        lines.append(f"- size `{name}`{mark}: {cfg_text}")
        info = (probed or {}).get(name)
        if not info or "ranks" not in info:
            lines.append("  - argument shapes: see the task text (they depend on the data)")
            continue
        per_rank = [_compress([_arg_text(a) for a in r], names, varargs) for r in info["ranks"]]
        if all(r == per_rank[0] for r in per_rank):
            lines.append(f"  - every rank (W={world_size}) receives:")
            lines += [f"    - {t}" for t in per_rank[0]]
        else:
            for rank, r in enumerate(per_rank):
                lines.append(f"  - rank {rank} receives:")
                lines += [f"    - {t}" for t in r]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
