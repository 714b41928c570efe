#!/usr/bin/env python3
"""Run the prompt's primitives example (pytest_kernelbench/templates/primitives_example.py) as a
real candidate through the plugin, on a throwaway problem whose reference computes the same
thing with torch.distributed (rank r: x + the x of rank (r + 1) % W). Passing means correct
outputs at every size and trial, and no race between calls: the harness runs its timed batches
back to back with no barrier between calls and checks a subset of their outputs after refilling
the inputs in place.

    python bench/primitives_example.py [--nproc N] [--out DIR]

N defaults to 1 (what a one-GPU machine can run); DIR to $OUT, else /tmp/kb-out. Writes
DIR/primitives_example-w<N>.json: versions, GPU, outcome, message, per-size speedup. Exit status
0 when the item passed. tests/test_primitives_example.py runs it at W = 1 where CUDA is there.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "pytest_kernelbench" / "templates" / "primitives_example.py"
PROBLEM = "collective/neighbour_sum"

PROBLEM_YAML = """\
title: Sum with the right neighbour (the prompt's primitives example)
description: |
  Rank r returns x + (the x of rank (r + 1) % W), summed in float32 and rounded to bfloat16.
category: collective
parallelism: []
difficulty: easy
libraries: [nccl]
world_sizes: [1, 2, 4, 8]
devices: [cuda]
dtype: bfloat16
sizes:
  tiny:   {n: 4096}
  odd:    {n: 1000003}        # not a multiple of the block size: the tail
  small:  {n: 524288}
  medium: {n: 8388608}
forbid: [collectives, p2p, symm_mem_ops]
inplace: false
timeout_s: 300
"""
REFERENCE = """\
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    rank, world = dist.get_rank(), dist.get_world_size()
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous())
    return (x.float() + parts[(rank + 1) % world].float()).to(x.dtype)
"""
HARNESS = """\
import torch

from pytest_kernelbench.harnesslib import exact_values


def inputs(size, rank, world_size, gen, device, dtype):
    return (exact_values((size["n"],), gen, device, dtype),)


def cost(size, world_size, dtype):
    e = torch.tensor([], dtype=dtype).element_size()
    n = size["n"]
    return {"link_bytes": n * e if world_size > 1 else 0, "hbm_bytes": 4 * n * e, "flops": n}
"""


def make_tree(root: Path) -> tuple[Path, Path]:
    """problems/collective/neighbour_sum/ and solutions/collective/neighbour_sum.py (the example)."""
    problems, solutions = root / "problems", root / "solutions"
    folder = problems / PROBLEM
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "problem.yaml").write_text(PROBLEM_YAML)
    (folder / "reference.py").write_text(REFERENCE)
    (folder / "harness.py").write_text(HARNESS)
    (solutions / "collective").mkdir(parents=True, exist_ok=True)
    (solutions / PROBLEM).with_suffix(".py").write_text(EXAMPLE.read_text())
    return problems, solutions


def run(nproc: int = 1, out_dir: Path | None = None, timeout_s: float = 900) -> dict:
    """Run the example through the plugin at W = nproc; the result as a dict (also written as JSON)."""
    out_dir = Path(out_dir or os.environ.get("OUT") or "/tmp/kb-out")
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kb-primitives-") as tmp:
        root = Path(tmp)
        problems, solutions = make_tree(root)
        report = root / "report.json"
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        cmd = [sys.executable, "-m", "pytest", "-p", "pytest_kernelbench.plugin", "-p", "no:cacheprovider", "-q",
               "-rA", str(problems), f"--kb-solutions={solutions}", f"--kb-nproc={nproc}", "--kb-device=cuda",
               "--kb-sizes=tiny,odd,small,medium", f"--kb-report={report}"]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout_s, env=env)
        doc = json.loads(report.read_text()) if report.exists() else {}
    items = doc.get("items") or [{}]
    item = items[0]
    machine = doc.get("machine") or {}
    result = {
        "what": "the prompt's primitives example as a candidate (bench/primitives_example.py)",
        "nproc": nproc, "gpu": machine.get("gpu_model"), "torch": machine.get("torch"), "cuda": machine.get("cuda"),
        "nccl": machine.get("nccl"), "outcome": item.get("outcome"), "failure": item.get("failure"),
        "message": item.get("message"),
        "sizes": [{"name": s.get("name"), "speedup": s.get("speedup"), "band": s.get("band")}
                  for s in item.get("sizes") or []],
        "wall_s": round(time.monotonic() - t0, 1),
        "pytest_tail": (proc.stdout + proc.stderr)[-3000:] if item.get("outcome") != "passed" else None,
    }
    (out_dir / f"primitives_example-w{nproc}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    result = run(args.nproc, Path(args.out) if args.out else None)
    print(json.dumps({k: v for k, v in result.items() if k != "pytest_tail"}, indent=1))
    if result.get("pytest_tail"):
        print(result["pytest_tail"])
    return 0 if result.get("outcome") == "passed" else 1


if __name__ == "__main__":
    sys.exit(main())
