#!/usr/bin/env python3
"""The committed prompt samples under docs/prompts/: what a model reads, one file per kind, so
that a change of wording, rules or hardware facts shows in review.

    python bench/gen_prompt_samples.py           # rewrite docs/prompts/*.md from the code
    python bench/gen_prompt_samples.py --check   # exit 1 and show the difference where one drifted
(`python -m bench.gen_prompt_samples` works too.) tests/test_prompt.py runs the check.

Each sample is built from recorded machine facts, never from the machine it runs on: the CPU
facts of reports/baselines/2026-11-23-cpu-main-job-80-fork.json, the 4xH200 facts of
reports/baselines/2026-11-21-h200x4-all50-reference.json. The native prompt's toolchain line
reads the local compiler; for a sample it is pinned to the recorded machine's CUDA version.
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
import tempfile
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "prompts"
CPU_FACTS = ROOT / "reports/baselines/2026-11-23-cpu-main-job-80-fork.json"
GPU_FACTS = ROOT / "reports/baselines/2026-11-21-h200x4-all50-reference.json"
# name -> (problem, device, world size, machine facts)
SAMPLES = {
    "rewrite-cpu.md": ("collective/all_reduce", "cpu", 4, CPU_FACTS),
    "rewrite-gpu.md": ("collective/all_reduce", "cuda", 4, GPU_FACTS),
    "native-gpu.md": ("ep/native_dispatch_payload", "cuda", 4, GPU_FACTS),
    "refine-gpu.md": ("collective/all_reduce", "cuda", 4, GPU_FACTS),
}
# what the refinement sample shows: a deadlock in round 1, a correct but slower round 2, of 3
REFINE_HISTORY = [
    ("import torch\n# ... round 1's module ...\ndef solution(x):\n    ...\n", {
        "outcome": "failed", "failure": "timeout", "llm": {"finish_reason": "stop"},
        "message": 'timeout: rank 1: size small, trial 0, candidate call: DistBackendError: store->get(\'0\') got '
                   'error: Connection closed by peer [127.0.0.1]:41213 GLHF (its peers timed out waiting for it: '
                   'rank 0 stopped progressing in "size small, trial 0, candidate call", at solution.py line 24 in '
                   'solution(): while flag[0] < epoch: pass)',
        "log_tail": "--- rank 0 ---\n[W1123 17:48:59.465821392 Utils.hpp:137] Warning: Environment variable "
                    "TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated; use TORCH_FR_BUFFER_SIZE instead (function "
                    "operator())\nThread 0x00007f (most recent call first):\n  File \"/tmp/kb/report/jobs/collective-"
                    "all-reduce-3f2a1c/candidate/solution.py\", line 24 in solution\n  File \"/opt/kb/pytest_"
                    "kernelbench/worker/main.py\", line 244 in call_candidate"}),
    ("import torch\n# ... round 2's module ...\ndef solution(x):\n    ...\n", {
        "outcome": "passed", "score": 0.81, "band": [0.79, 0.83], "verdict": "degraded",
        "llm": {"finish_reason": "stop"},
        "sizes": [{"name": n, "speedup": sp, "band": b, "roof_bound": bound, "roof_s": roof,
                   "roofline": {"candidate": roof / cand},
                   "timing": {"reference": {"median_s": ref}, "candidate": {"median_s": cand}}}
                  for n, sp, b, bound, roof, ref, cand in (
                      ("small", 0.62, [0.60, 0.64], "latency", 1.6e-5, 3.2e-5, 5.2e-5),
                      ("medium", 0.85, [0.83, 0.87], "link", 8.2e-5, 1.08e-4, 1.27e-4),
                      ("large", 0.99, [0.97, 1.01], "link", 1.31e-3, 1.71e-3, 1.73e-3))]}),
]


def _machine(path: Path) -> dict:
    return json.loads(path.read_text())["machine"]


def render(name: str, shapes_dir: Path | None = None) -> str:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from pytest_kernelbench.candidates import prompt
    from pytest_kernelbench.session import Placement
    from pytest_kernelbench.spec import shapes
    from pytest_kernelbench.spec.problem import load_problem
    pid, device, world, facts = SAMPLES[name]
    problems = ROOT / "problems"
    problem = load_problem(problems / pid / "problem.yaml", problems)
    machine = _machine(facts)
    sizes = [s for s in problem.sizes if (s == "tiny") == (device == "cpu")]
    placement = Placement(device, world, sizes)
    with tempfile.TemporaryDirectory() as tmp:
        probed = shapes.probe(problem, world, shapes_dir or Path(tmp))
    pinned = f"CUDA {machine.get('cuda')}" if machine.get("cuda") else None
    with mock.patch("pytest_kernelbench.native.build.compiler_version", lambda compiler: pinned), \
            mock.patch("pytest_kernelbench.native.prompt.compiler_version", lambda compiler: pinned):
        first = prompt.messages(problem, placement, machine, probed)
    if name.startswith("refine"):
        chat = prompt.refine_messages(first, REFINE_HISTORY, problem.harness_path.read_text(), device, rounds=3)
        return prompt.render(chat[len(first):])
    return prompt.render(first)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = ap.parse_args(argv)
    drifted = 0
    with tempfile.TemporaryDirectory() as tmp:      # one shape probe per problem
        texts = {name: render(name, Path(tmp)) for name in SAMPLES}
    for name, text in texts.items():
        path = OUT / name
        if args.check:
            old = path.read_text() if path.exists() else ""
            if old != text:
                drifted += 1
                sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                           f"{path} (committed)", f"{path} (rendered)"))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if drifted:
        print(f"\n{drifted} sample(s) drifted: run python bench/gen_prompt_samples.py and review the diff")
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main())
