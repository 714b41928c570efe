"""The spread of honest reduction orders at GPU sizes, in one process (issue 49's calibration): for the
problems whose reduced data is not an exact grid (a GEMM's partial products), every rank's partial
is computed as that rank would (harness.inputs with its rank; cuBLAS on a GPU, else the CPU's GEMM,
whose inner accumulation order differs but not the bfloat16 roundings that dominate), then summed as a bfloat16
reference does (NCCL rounds to bfloat16 at every hop: rank order, reversed, a pairwise tree) and
as an honest fp32-accumulating kernel does (float32 partials, float32 sum, rounded once). Printed:
per size and pair, the largest |honest - reference| over the reference's rms, and how much of each
tolerance rule it uses (1.0 = at the bound).

    python bench/oracle_gpu_spread.py [--world 8] [--sizes small,medium,large] [--device cuda|cpu]
    (reports/baselines/2026-12-07-cpu-oracle-spread.jsonl: --device cpu --sizes small,medium)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PROBLEMS = ("fusion/gemm_allreduce", "fusion/gemm_reduce_scatter")


def orders(parts: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """The bfloat16 sums an NCCL-like reference may take (rounded at every step)."""
    def chain(seq):
        acc = seq[0].clone()
        for p in seq[1:]:
            acc = acc + p
        return acc

    def tree(seq):
        while len(seq) > 1:
            seq = [seq[i] + seq[i + 1] if i + 1 < len(seq) else seq[i] for i in range(0, len(seq), 2)]
        return seq[0]
    return {"ring": chain(parts), "reversed": chain(parts[::-1]), "tree": tree(list(parts))}


def use(diff: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, scaled: bool) -> float:
    rms = float(ref.double().square().mean().sqrt())
    bound = (atol * rms if scaled else atol) + rtol * ref.double().abs()
    return float((diff / bound).max())


def main() -> None:
    from pytest_kernelbench.rank.files import load_module
    from pytest_kernelbench.spec.problem import load_problem
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--sizes", default="small,medium,large")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    dev = torch.device(a.device)
    rows = []
    for pid in a.problems.split(","):
        problem = load_problem(REPO / "problems" / pid / "problem.yaml", REPO / "problems")
        harness = load_module(str(problem.harness_path), "_spread_h", register=False)
        tol = problem.tolerance
        for size in a.sizes.split(","):
            p16, p32 = [], []
            for r in range(a.world):
                gen = torch.Generator(device=dev).manual_seed(1000 + r)
                x, w = harness.inputs(problem.sizes[size], r, a.world, gen, dev, torch.bfloat16)
                p16.append(x @ w)                              # the reference's partial: bfloat16 out
                p32.append(x.float() @ w.float())              # an honest kernel keeps it in float32
                del x, w
            honest = torch.stack(p32).sum(0).to(torch.bfloat16).double()
            exact = torch.stack([p.double() for p in p32]).sum(0)
            for name, ref in orders(p16).items():
                ref = ref.double()
                diff = (honest - ref).abs()
                rms = float(ref.square().mean().sqrt())
                rows.append({"problem": pid, "size": size, "world": a.world, "reference_order": name,
                             "max_abs_over_rms": round(float(diff.max()) / rms, 5),
                             "ref_vs_exact_over_rms": round(float((ref - exact).abs().max()) / rms, 5),
                             "use_of_plain_rule": round(use(diff, ref, tol["atol"], tol["rtol"], False), 4),
                             "use_of_scaled_rule": round(use(diff, ref, tol["atol"], tol["rtol"], True), 4)})
                print(json.dumps(rows[-1]), flush=True)
            del p16, p32, honest, exact
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
