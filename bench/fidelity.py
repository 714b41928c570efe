"""Timing fidelity on a GPU machine (issue: timing you can trust).

1. The same problem and candidate (all_reduce, the reference as candidate, large = 256 MiB per
   rank) run N times as separate pytest runs: medians must agree within 2%.
2. The harness's NCCL all_reduce bus bandwidth at 256 MiB vs an independent plain loop
   (bench/plain_allreduce.py) in the same job: within 5%.
3. Self-check speedups (reference vs an exact copy of itself) at every size: 1.00 +- 0.03.

    python bench/fidelity.py OUTDIR [--runs 5]
Writes OUTDIR/fidelity.json and prints a table last.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def pytest_run(out: Path, i: int, world: int) -> dict:
    report = out / f"fid-{i}.json"
    cmd = [sys.executable, "-m", "pytest", "-p", "pytest_kernelbench.plugin", "-p", "no:cacheprovider", "-q",
           str(REPO / "problems" / "collective" / "all_reduce"), "--kb-candidate=reference", "--kb-trials=1",
           f"--kb-nproc={world}", f"--kb-report={report}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(cmd, cwd=REPO, env=env, check=False, capture_output=True, text=True)
    return json.loads(report.read_text())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--world", type=int, default=4)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [pytest_run(out, i, args.world) for i in range(args.runs)]
    per_run = []
    for doc in runs:
        item = doc["items"][0]
        sizes = {s["name"]: s for s in item.get("sizes", [])}
        per_run.append({name: {"ref_s": s["timing"]["reference"]["median_s"], "cand_s": s["timing"]["candidate"]["median_s"],
                               "speedup": s["speedup"]} for name, s in sizes.items()})
    large = [r["large"]["ref_s"] for r in per_run if "large" in r]
    spread = (max(large) - min(large)) / statistics.median(large) if large else None
    plain = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            f"--nproc-per-node={args.world}", str(REPO / "bench" / "plain_allreduce.py"), "256"],
                           capture_output=True, text=True, env={**os.environ})
    plain_line = [line for line in plain.stdout.splitlines() if line.startswith("{")]
    plain_res = json.loads(plain_line[-1]) if plain_line else {"error": plain.stderr[-2000:]}
    n_bytes = 134217728 * 2
    w = args.world
    harness_busbw = [2 * (w - 1) / w * n_bytes / t / 1e9 for t in large]
    result = {"runs": per_run, "large_ref_medians_s": large, "large_spread": spread,
              "plain": plain_res, "harness_busbw_GBps": harness_busbw,
              "busbw_ratio": (statistics.median(harness_busbw) / plain_res["clone_then_all_reduce"]["busbw_GBps"])
              if large and "clone_then_all_reduce" in plain_res else None,
              "self_check_speedups": {name: [r[name]["speedup"] for r in per_run if name in r] for name in per_run[0]} if per_run else {}}
    (out / "fidelity.json").write_text(json.dumps(result, indent=1))
    print("run  " + "  ".join(f"{n:>22}" for n in per_run[0]))
    for i, r in enumerate(per_run):
        print(f"{i:<4} " + "  ".join(f"{v['ref_s'] * 1e6:9.1f}us x{v['speedup']:.3f}".rjust(22) for v in r.values()))
    print(f"large: medians spread {spread:.2%} over {len(large)} runs (target < 2%)" if spread is not None else "large: no data")
    if result["busbw_ratio"]:
        print(f"busbw at 256 MiB: harness {statistics.median(harness_busbw):.0f} GB/s vs plain loop doing the same "
              f"work {plain_res['clone_then_all_reduce']['busbw_GBps']:.0f} GB/s: ratio {result['busbw_ratio']:.3f} "
              f"(target 0.95-1.05); plain in-place all_reduce {plain_res['inplace']['busbw_GBps']:.0f} GB/s")
    else:
        print(f"plain loop: {plain_res}")


if __name__ == "__main__":
    main()
