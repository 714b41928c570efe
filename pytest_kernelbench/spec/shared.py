"""The shared-device placement's rules (--kb-oversubscribe, docs/one-gpu.md): what cannot run with
several ranks on one GPU, and why. A problem says so in problem.yaml (`shared_device`); a candidate
that calls NCCL itself is seen in its source. Both skip before launch, with the reason, never as
the candidate's failure. Pure functions: no torch, no pytest."""
from __future__ import annotations

import re
from pathlib import Path

# what a problem may need that ranks sharing one GPU cannot give, and why not
NEEDS = {
    "nccl": "NCCL, which refuses two ranks on one GPU (\"Duplicate GPU detected\")",
    "distinct_devices": "distinct GPUs (peer access or copy engines between devices)",
}

# a candidate calling NCCL itself, not through torch.distributed's collectives (which gloo serves):
# torch's NCCL bindings, an NCCL group made by hand, NCCL's C API or device API, cupy's or pynccl's
_CALLS_NCCL = re.compile(
    r"torch\.cuda\.nccl\b|ProcessGroupNCCL|backend\s*=\s*['\"]nccl['\"]|new_group\([^)]*['\"]nccl['\"]"
    r"|init_process_group\(\s*['\"]nccl['\"]|\bnccl[A-Z]\w*\s*\(|cupy\.cuda\.nccl|\bpynccl\b|<nccl(_device)?[./]")

# (a reference's or candidate's CUDA point-to-point through torch.distributed is served there: gloo
# sends no CUDA tensors, so rank/p2pstage.py stages them through host memory in every process)


def reference_needs(source: str) -> dict | None:
    """What a reference found only at run time (ParallelKernelBench's, which has no problem.yaml)
    needs that a shared GPU cannot give, read off its source: NCCL called itself. The
    `shared_device` a problem.yaml would declare."""
    if (m := _CALLS_NCCL.search(source)) is not None:
        return {"needs": ["nccl"], "why": f"its reference calls NCCL itself ({m.group(0).strip()})"}
    return None


class SharedDeviceError(ValueError):
    """A bad `shared_device` field; str() says what is wrong (the loader names the file)."""


def parse(value: object) -> dict | None:
    """problem.yaml `shared_device`: {needs: [nccl | distinct_devices, ...], why: <sentence>}
    for a problem that cannot run with ranks sharing a GPU; absent: it can."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SharedDeviceError(f"field 'shared_device' must be a mapping {{needs: [...], why: ...}}, got {value!r}")
    unknown = sorted(set(value) - {"needs", "why"})
    if unknown:
        raise SharedDeviceError(f"unknown field 'shared_device.{unknown[0]}' (known: needs, why)")
    needs = value.get("needs")
    if not isinstance(needs, list) or not needs:
        raise SharedDeviceError(f"field 'shared_device.needs' must be a non-empty list of {', '.join(NEEDS)}, "
                                f"got {needs!r}")
    bad = [n for n in needs if n not in NEEDS]
    if bad:
        raise SharedDeviceError(f"field 'shared_device.needs' has {bad[0]!r}; expected any of {', '.join(NEEDS)}")
    why = value.get("why")
    if not isinstance(why, str) or not why.strip():
        raise SharedDeviceError(f"field 'shared_device.why' must be a sentence saying why, got {why!r}")
    return {"needs": list(dict.fromkeys(needs)), "why": " ".join(why.split())}


def problem_skip(declared: dict | None) -> str | None:
    """Why a problem cannot run with ranks sharing a GPU, if it cannot (its problem.yaml says so)."""
    if not declared:
        return None
    needs = "; ".join(NEEDS[n] for n in declared["needs"])
    return f"cannot run with ranks sharing a GPU: needs {needs}: {declared['why']}"


def candidate_skip(source: str | None) -> str | None:
    """Why a candidate cannot run with ranks sharing a GPU, if its source calls NCCL itself."""
    found = _CALLS_NCCL.search(source or "")
    if found is None:
        return None
    line = (source or "").count("\n", 0, found.start()) + 1
    return (f"cannot run with ranks sharing a GPU: the candidate calls NCCL itself ({found.group(0).strip()!s} "
            f"at line {line}), and {NEEDS['nccl'].split(', ', 1)[1]}")


def classify(problems: list, root: Path | None = None) -> list[tuple[str, str]]:
    """(problem id, "runs" or the skip reason) for every CUDA problem: the table of docs/one-gpu.md."""
    rows = []
    for p in problems:
        if "cuda" not in p.devices:
            continue
        multi = [w for w in p.world_sizes if w >= 2]
        reason = (problem_skip(p.shared_device)
                  or (f"multi-node (needs --kb-nodes >= {p.nodes}): its ranks span nodes" if p.nodes > 1 else None)
                  or (None if multi else "W = 1 only: one GPU runs it timed, no sharing"))
        rows.append((p.id, reason or "runs"))
    return rows

