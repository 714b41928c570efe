"""What a fresh input set costs the checker (one GPU): harnesslib.exact_values (normals drawn in
bf16, then scaled, rounded, clamped and scaled back in place) against uniform int32 indices into a
table of the rounded distribution's quantiles (the same law, two passes of the output's size
instead of five), per set of all_reduce's sizes, and what a slot copy of the same bytes costs.
On one H100 (2026-11-27) the table read 1.54 ms a 256 MiB set against 1.04 (a copy: 0.18), so
exact_values stayed as it was. It now rounds in one pass fewer (harnesslib.grid_round_: clamp, add
and take away 1.5 * 2^e); the "scaled" column is the form before (scale, round, clamp, scale back).

    python bench/exact_values_cost.py [--sets 10]

A benchmark, not a test: figures depend on the machine.
"""
from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from pytest_kernelbench.harnesslib import exact_values  # noqa: E402

SIZES = {"small": 1 << 19, "medium": 1 << 23, "large": 1 << 27}     # bf16 elements (all_reduce's n)


QUANTILES = 1 << 15


@functools.lru_cache(maxsize=8)
def _table(dtype: torch.dtype, device: str, step: float = 0.125, lim: float = 4.0) -> torch.Tensor:
    p = (torch.arange(QUANTILES, dtype=torch.float64) + 0.5) / QUANTILES
    k = lim / step
    return (torch.special.ndtri(p) / step).round_().clamp_(-k, k).mul_(step).add_(0.0).to(dtype=dtype, device=device)


def from_table(shape, gen, device, dtype):
    """The rounded, clamped normal as uniform indices into its quantiles."""
    index = torch.randint(0, QUANTILES, tuple(shape), generator=gen, device=device, dtype=torch.int32)
    return _table(dtype, str(device))[index]


def scaled_form(shape, gen, device, dtype, step: float = 0.125, lim: float = 4.0):
    """exact_values before: drawn in dtype, then scaled, rounded, clamped and scaled back."""
    k = lim / step
    return torch.randn(shape, generator=gen, device=device, dtype=dtype).mul_(1 / step).round_().clamp_(-k, k).mul_(step)


def timed(fn, sets: int, repeat: int = 5) -> float:
    """Median seconds per set over `repeat` rounds of `sets` sets, synchronized."""
    out = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for k in range(sets):
            fn(k)
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) / sets)
    return sorted(out)[len(out) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", type=int, default=10)
    args = ap.parse_args()
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}")
    print("| size | elements | set MiB | exact_values ms | scaled form (before) ms | quantile table ms | a copy of the set ms "
          "| exact_values / scaled |")
    print("|---|---|---|---|---|---|---|---|")
    for name, n in SIZES.items():
        src = torch.empty(n, dtype=torch.bfloat16, device=dev)
        dst = torch.empty_like(src)

        def ours(k, n=n):
            gen.manual_seed(k)
            return exact_values((n,), gen, dev, torch.bfloat16)

        def table(k, n=n):
            gen.manual_seed(k)
            return from_table((n,), gen, dev, torch.bfloat16)

        def before(k, n=n):
            gen.manual_seed(k)
            return scaled_form((n,), gen, dev, torch.bfloat16)

        ours(0), table(0), before(0)     # warm-up: kernels loaded, the table made
        t_ours, t_table, t_before = timed(ours, args.sets), timed(table, args.sets), timed(before, args.sets)
        t_copy = timed(lambda k, dst=dst, src=src: dst.copy_(src), args.sets)
        print(f"| {name} | {n} | {2 * n / 2**20:.0f} | {t_ours * 1e3:.3f} | {t_before * 1e3:.3f} | {t_table * 1e3:.3f} | "
              f"{t_copy * 1e3:.3f} | {t_ours / t_before:.2f} |")


if __name__ == "__main__":
    main()
