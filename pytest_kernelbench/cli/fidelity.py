"""Timing fidelity on a GPU machine (issue: timing you can trust).

1. The same problem and candidate (all_reduce, the reference as candidate, large = 256 MiB per
   rank) run N times as separate pytest runs: medians must agree within 2%.
2. The harness's NCCL all_reduce bus bandwidth at 256 MiB vs an independent plain loop
   (bench/plain_allreduce.py, under torchrun) in the same job: within 5%.
3. Self-check speedups (reference vs an exact copy of itself) at every size: 1.00 +- 0.03.

    kernelbench fidelity OUTDIR [--runs 5] [--world 4]     (from the repository root)
Writes OUTDIR/fidelity.json and prints a table last. `summarize` is the pure part.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from ..protocol import Outcome

LARGE_BYTES = 134217728 * 2       # the large size of all_reduce: 128 Mi bf16 elements per rank


def pytest_run(root: Path, out: Path, i: int, world: int) -> dict:
    report = out / f"fid-{i}.json"
    cmd = [sys.executable, "-m", "pytest", "-p", "pytest_kernelbench.plugin", "-p", "no:cacheprovider", "-q",
           str(root / "problems" / "collective" / "all_reduce"), "--kb-candidate=reference", "--kb-trials=1",
           f"--kb-nproc={world}", f"--kb-report={report}"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run(cmd, cwd=root, env=env, check=False, capture_output=True, text=True)
    return json.loads(report.read_text())


def plain_loop(root: Path, world: int) -> dict:
    plain = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                            f"--nproc-per-node={world}", str(root / "bench" / "plain_allreduce.py"), "256"],
                           capture_output=True, text=True, env={**os.environ})
    found = [line for line in plain.stdout.splitlines() if line.startswith("{")]
    return json.loads(found[-1]) if found else {"error": plain.stderr[-2000:]}


def summarize(runs: list[dict], plain: dict, world: int) -> dict:
    per_run = []
    for doc in runs:
        item = doc["items"][0]
        per_run.append({s["name"]: {"ref_s": s["timing"]["reference"]["median_s"],
                                    "cand_s": s["timing"]["candidate"]["median_s"], "speedup": s["speedup"]}
                        for s in item.get("sizes", [])})
    large = [r["large"]["ref_s"] for r in per_run if "large" in r]
    spread = (max(large) - min(large)) / statistics.median(large) if large else None
    busbw = [2 * (world - 1) / world * LARGE_BYTES / t / 1e9 for t in large]
    ratio = (statistics.median(busbw) / plain["clone_then_all_reduce"]["busbw_GBps"]
             if large and "clone_then_all_reduce" in plain else None)
    return {"runs": per_run, "large_ref_medians_s": large, "large_spread": spread, "plain": plain,
            "harness_busbw_GBps": busbw, "busbw_ratio": ratio,
            "self_check_speedups": {name: [r[name]["speedup"] for r in per_run if name in r] for name in per_run[0]}
            if per_run else {}}


def lines(result: dict) -> list[str]:
    per_run, spread, plain = result["runs"], result["large_spread"], result["plain"]
    out = []
    if per_run:
        out.append("run  " + "  ".join(f"{n:>22}" for n in per_run[0]))
        for i, r in enumerate(per_run):
            out.append(f"{i:<4} " + "  ".join(f"{v['ref_s'] * 1e6:9.1f}us x{v['speedup']:.3f}".rjust(22)
                                              for v in r.values()))
    out.append(f"large: medians spread {spread:.2%} over {len(result['large_ref_medians_s'])} runs (target < 2%)"
               if spread is not None else "large: no data")
    if result["busbw_ratio"]:
        out.append(f"busbw at 256 MiB: harness {statistics.median(result['harness_busbw_GBps']):.0f} GB/s vs plain "
                   f"loop doing the same work {plain['clone_then_all_reduce']['busbw_GBps']:.0f} GB/s: ratio "
                   f"{result['busbw_ratio']:.3f} (target 0.95-1.05); plain in-place all_reduce "
                   f"{plain['inplace']['busbw_GBps']:.0f} GB/s")
    else:
        out.append(f"plain loop: {plain}")
    return out


def run(out: Path, runs: int, world: int, root: Path | None = None) -> dict:
    root = root or Path.cwd()
    out.mkdir(parents=True, exist_ok=True)
    result = summarize([pytest_run(root, out, i, world) for i in range(runs)], plain_loop(root, world), world)
    (out / "fidelity.json").write_text(json.dumps(result, indent=1))
    return result


# ---- the self-check spread over whole-suite runs (issue 16) ----------------------------------------
SMALL_SIZES = ("tiny", "small")      # their target is +-5 %; every other size +-3 %


def target(size: str) -> float:
    return 0.05 if size in SMALL_SIZES else 0.03


def spread(docs: list[dict]) -> dict[str, dict]:
    """Per size name over every run: how many self-check speedups lie within 1 +- target, their
    range, the ones outside (problem, run, speedup, noise band), and how many noise bands hold 1.0
    (the verdict then reads on_par, whatever the point estimate)."""
    out: dict[str, dict] = {}
    for run, doc in enumerate(docs):
        for item in doc.get("items", []):
            if item.get("outcome") != Outcome.PASSED:
                continue
            for s in item.get("sizes") or []:
                x = s.get("speedup")
                if x is None:
                    continue
                row = out.setdefault(s["name"], {"n": 0, "within": 0, "band_holds_1": 0, "min": x, "max": x,
                                                 "outside": [], "target": target(s["name"])})
                row["n"] += 1
                row["min"], row["max"] = min(row["min"], x), max(row["max"], x)
                if abs(x - 1.0) <= row["target"]:
                    row["within"] += 1
                else:
                    row["outside"].append({"problem": item["problem"], "run": run, "speedup": x, "band": s.get("band")})
                band = s.get("band")
                if band and band[0] <= 1.0 <= band[1]:
                    row["band_holds_1"] += 1
    return out


def spread_lines(table: dict[str, dict], runs: int) -> list[str]:
    order = ["tiny", "small", "medium", "large"]
    names = sorted(table, key=lambda n: (order.index(n) if n in order else len(order), n))
    lines = [f"self-check spread over {runs} run(s): speedup of the reference against itself",
             "| size | target | within | range | band holds 1.0 | outside (problem: speedup [band]) |",
             "|---|---|---|---|---|---|"]
    for n in names:
        r = table[n]
        outside = "; ".join(f"{o['problem']}#{o['run']}: {o['speedup']:.3f}"
                            + (f" [{o['band'][0]:.3f}, {o['band'][1]:.3f}]" if o.get("band") else "")
                            for o in r["outside"][:6]) + (" ..." if len(r["outside"]) > 6 else "")
        lines.append(f"| {n} | +-{r['target']:.0%} | {r['within']}/{r['n']} | {r['min']:.3f}-{r['max']:.3f} | "
                     f"{r['band_holds_1']}/{r['n']} | {outside or '-'} |")
    return lines
