"""The oracle audit (issue 49): does each problem's checker pass honest kernels that reduce in
another order or precision, and fail planted wrong ones (bench/oracle_kernels.py), at the harness's
input scale and at 2^-10 and 2^10 times it? Runs every problem whose reference runs on gloo, at its
smallest world size (2 where allowed), one rank job per world size, on CPU.

    python bench/oracle_audit.py [--problems GLOB,...] [--scales 1,2^-10,2^10] [--json OUT]
                                 [--md reports/baselines/2026-12-07-cpu-oracle-audit.md]

Numeric stress: every floating input tensor is multiplied by the scale before the reference and
the kernels see it, and the tolerance's atol with it (an absolute floor means "small next to the
data"; rtol is scale-free). Powers of two keep the exact_values grids exact. The verdicts are the
checker's own comparison (rank.checks.check_call) with the problem's tolerance and check().

tests/test_oracles.py runs this at the CI scale and asserts every planted kernel fails wherever it
changes the output and every honest one passes on every reduction problem.
"""
from __future__ import annotations

import argparse
import datetime
import fnmatch
import inspect
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

SCALES = {"1": 1.0, "2^-10": 2.0 ** -10, "2^10": 2.0 ** 10}
# reductions the reference does locally, after moving the ranks' data (no reducing collective)
LOCAL_REDUCTIONS = {
    "ep/moe_combine": "weighted sum of the top-k experts' outputs from other ranks",
    "ep/moe_layer_forward": "weighted sum of the top-k experts' outputs from other ranks",
    "ep/native_combine_reduce": "weighted sum of the top-k experts' outputs from other ranks",
    "fusion/moe_gemm_alltoall": "weighted sum of the top-k experts' outputs from other ranks",
    "fusion/ring_attention": "online softmax over every rank's keys",
    "fusion/zigzag_ring_attention": "online softmax over every rank's keys",
    "fusion/allgather_kv_attention": "softmax over every rank's keys",
    "utility/int8_quantized_allreduce": "sum of the ranks' dequantized chunks",
    "utility/vocab_parallel_topk_logprobs": "log-sum-exp and top-k over every rank's vocabulary shard",
    "collective/usp_attention": "online softmax over every ring group's keys",
    "p2p/zigzag_ring_attention_backward": "dK/dV summed over every rank's queries as they travel the ring",
    "p2p/linear_attn_cp_state_scan": "decayed prefix of the earlier ranks' states",
    "ep/torchrec_kjt_alltoall": "embedding-bag sums over ids from every rank",
    "ep/moe_dispatch_fp8": "weighted sum of the top-k experts' outputs from other ranks (its combine)",
}
_SCALE_FREE = "assert_close_scaled("      # a harness whose check() compares on the reference's rms
_REDUCING = re.compile(r"dist\.(all_reduce|reduce_scatter_tensor|reduce_scatter|reduce)\(")


# ---- the parent: static facts, jobs (the table: oracle_table.py) --------------------------------------------------
def problems(globs: list[str]) -> list:
    from pytest_kernelbench.spec.problem import load_problem
    found = []
    for y in sorted((REPO / "problems").glob("*/*/problem.yaml")):
        p = load_problem(y, REPO / "problems")
        if any(fnmatch.fnmatch(p.id, g) for g in globs):
            found.append(p)
    return found


def reduction(problem) -> str | None:
    """Why the problem's output sums, averages or maxes over ranks, or None."""
    src = problem.reference_path.read_text()
    ops = sorted(set(_REDUCING.findall(src)))
    if ops:
        return "reducing collective: " + ", ".join(ops)
    return LOCAL_REDUCTIONS.get(problem.id)


def rule(problem) -> str:
    """The tolerance rule the problem's files give (its check() or the comparison's defaults)."""
    from pytest_kernelbench.spec.problem import DEFAULT_TOLERANCE
    text = problem.harness_path.read_text()
    tol = problem.tolerance
    parts = ["exact grid (exact_values)"] if "exact_values" in text else []
    if _SCALE_FREE in text:
        parts.append("data-scaled (assert_close_scaled: atol x rms of the reference)")
    elif re.search(r"^def check\(", text, re.M):
        parts.append("custom check()")
    default = DEFAULT_TOLERANCE[problem.dtype]
    what = "dtype default" if tol == default else "explicit"
    parts.append(f"{what} atol={tol['atol']:g} rtol={tol['rtol']:g}")
    return "; ".join(parts)


def world_of(problem, want: int | None = None) -> int:
    """`want` where the problem allows it, else its smallest world size (2 where allowed)."""
    ws = sorted(problem.world_sizes)
    return want if want in ws else 2 if 2 in ws else ws[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_jobs(chosen: list, scales: list[str], timeout_s: float, size: str = "tiny", want: int | None = None) -> dict:
    """One gloo job per world size; {problem id: rank 0's merged result}."""
    by_world: dict[int, list[str]] = {}
    for p in chosen:
        by_world.setdefault(world_of(p, want), []).append(p.id)
    results: dict = {}
    for world, ids in sorted(by_world.items()):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out.json"
            port = _free_port()
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                   "OMP_NUM_THREADS": "1"}
            procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(r), str(world), str(port), str(out),
                                       ",".join(ids), ",".join(scales), size], env=env) for r in range(world)]
            deadline = time.monotonic() + timeout_s
            for pr in procs:
                try:
                    pr.wait(max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    for q in procs:
                        q.kill()
                    raise SystemExit(f"oracle audit: the W={world} job ran past {timeout_s:.0f} s") from None
            if not out.exists():
                raise SystemExit(f"oracle audit: the W={world} job wrote no result (exit codes {[p.returncode for p in procs]})")
            results.update(json.loads(out.read_text()))
    return results


# ---- the ranks ------------------------------------------------------------------------------
def worker(rank: int, world: int, port: int, out: str, ids: list[str], scales: list[str], size: str) -> None:
    import datetime as dt

    import warnings

    import torch
    import torch.distributed as dist
    warnings.filterwarnings("ignore", category=FutureWarning)     # torch's renamed collectives, once per call
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=dt.timedelta(seconds=180))
    by_id = {p.id: p for p in problems(ids)}
    merged = {}
    for pid in ids:
        if rank == 0:       # where a job that hangs stopped
            print(f"oracle audit W={world}: {pid}", file=sys.stderr, flush=True)
        env = dict(os.environ)
        try:
            mine = audit_problem(by_id[pid], rank, world, scales, size)
        except Exception as e:  # noqa: BLE001 - recorded per problem; a symmetric failure keeps ranks in step
            import traceback
            where = traceback.extract_tb(e.__traceback__)[-1]
            mine = {"error": f"{type(e).__name__}: {e}"[:300] + f" ({Path(where.filename).name}:{where.lineno})"}
        os.environ.clear()          # a multi-node problem's layout variables stay with it
        os.environ.update(env)
        everyone: list = [None] * world
        dist.all_gather_object(everyone, mine)
        merged[pid] = merge(everyone, world)
    if rank == 0:
        Path(out).write_text(json.dumps(merged, indent=1))
    dist.barrier()
    dist.destroy_process_group()


def audit_problem(problem, rank: int, world: int, scales: list[str], size: str = "tiny") -> dict:
    """This rank's view, per scale and kernel: the judged ranks and judge()'s verdict here."""
    import oracle_kernels as ok
    import torch
    from pytest_kernelbench.harnesslib import grid_drawn
    from pytest_kernelbench.rank import checks, compare
    from pytest_kernelbench.rank.files import load_module

    tag = zlib.crc32(problem.id.encode())
    harness = load_module(str(problem.harness_path), f"_oa_h_{tag}", register=False)
    reference = load_module(str(problem.reference_path), f"_oa_r_{tag}", register=False)
    harness_check = getattr(harness, "check", None)
    dtype = getattr(torch, problem.dtype)
    shared = "shared_seed" in inspect.signature(harness.inputs).parameters
    if problem.nodes > 1:      # a multi-node problem on one host: two "nodes" of W/2 ranks
        os.environ.update(LOCAL_WORLD_SIZE=str(world // 2), KB_NODES="2")

    def make(set_no: int):
        gen = torch.Generator().manual_seed(zlib.crc32(f"{problem.id}/{set_no}/{rank}".encode()))
        extra = {"shared_seed": zlib.crc32(f"{problem.id}/{set_no}".encode())} if shared else {}
        with grid_drawn(tag << 16):     # one grid for every set: sets of different calls meet
            return harness.inputs(problem.sizes[size], rank, world, gen, torch.device("cpu"), dtype, **extra)

    def judge(result, expected, fresh, tol) -> list:
        """[how far from the reference here (inf: another structure), flagged by the checker, message]
        of one kernel's (output, inputs after the call)."""
        out, after = result
        cand_in = after if problem.inplace else compare.clone(fresh)
        differs = _distance(out, expected[0]) if compare.structure(out, expected[0]) is None else float("inf")
        if problem.inplace and differs < float("inf"):
            differs = max(differs, _distance(after, expected[1]))
        try:
            category, msg, _ = checks.check_call(out, expected[0], cand_in, expected[1], fresh, tol, problem.inplace,
                                                 harness_check)
        except Exception as e:  # noqa: BLE001 - a check() that raises on a wrong output also fails it
            category, msg = "mismatch", f"check() raised {type(e).__name__}: {e}"
        # how much of the bound an honest kernel uses; a problem's own check() has its own bound
        margin = None if harness_check and not scale_free else _margin(out, expected[0], tol, scale_free)
        return [differs, category is not None, (msg or "")[:240], margin]

    found: dict = {"world": world}
    has_float = any(ok.scalable(t) for _, t in compare.leaves(make(0)) if isinstance(t, torch.Tensor))
    scale_free = harness_check is not None and _SCALE_FREE in problem.harness_path.read_text()
    rms1 = None
    for name in scales:
        s = SCALES[name]
        if s != 1.0 and not has_float:
            found[name] = "no floating-point input to scale"
            continue
        previous, fresh = ok.scaled(make(0), s), ok.scaled(make(1), s)
        expected = ok.run_reference(reference, fresh)
        if rms1 is None:
            rms1 = _rms(expected if s == 1.0 else ok.run_reference(reference, make(1)), dist_max=True)
        # the absolute floor as if the harness had drawn its data at this scale: scaled as the
        # reference's output scales (by s for a linear problem, s^2 for a product of two inputs);
        # a scale-free check (harnesslib.assert_close_scaled) needs none
        ratio = 1.0 if scale_free or not rms1 else _rms(expected, dist_max=True) / rms1
        tol = {"atol": problem.tolerance["atol"] * ratio, "rtol": problem.tolerance["rtol"]}
        mutated = ok.changed(expected[1], fresh)
        row: dict = {}
        honest = {}
        for kind in (*ok.HONEST, "fp32_vs_native"):
            try:
                if kind == "fp32_vs_native":        # the reference as the GPU sums: NCCL's bfloat16 ring
                    me = judge(honest["honest_fp32"], honest["honest_native"], fresh, tol)
                else:
                    honest[kind] = ok.honest(kind, reference, fresh, expected, dtype)
                    me = judge(honest[kind], expected, fresh, tol)
            except Exception as e:  # noqa: BLE001 - an honest variant the reference cannot run (a dtype it needs)
                me = ["error", False, f"{type(e).__name__}: {e}"[:240], None]
            row[kind] = {"judged": list(range(world)), "me": me}
        for r, result in ok.skip_rank_kernels(reference, fresh, rank, world):
            row[f"skip_rank{r}"] = {"judged": [q for q in range(world) if q != r], "me": judge(result, expected, fresh, tol)}
        for kind in dict.fromkeys(("stale", "missing_barrier0", f"missing_barrier{world - 1}", "wrong_peer", "half")):
            result, judged = ok.planted(kind, reference, fresh, previous, expected, rank, world, mutated)
            row[kind] = {"judged": judged, "me": judge(result, expected, fresh, tol)}
        found[name] = row
    return found


def _rms(result, dist_max: bool = False) -> float:
    """The rms of the floating tensors of (output, inputs after the call), the largest over ranks."""
    import torch
    import torch.distributed as dist
    from pytest_kernelbench.rank import compare
    sq, n = 0.0, 0
    for _, t in compare.leaves(result[0]):
        if isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            t = t.double()
            t = t[torch.isfinite(t)]
            sq, n = sq + float((t * t).sum()), n + t.numel()
    mine = torch.tensor([(sq / n) ** 0.5 if n else 0.0], dtype=torch.float64)
    if dist_max:
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return float(mine)


def _margin(out, expected, tol: dict, scale_free: bool) -> float:
    """The largest |out - expected| / (atol + rtol |expected|) over floating elements: how much of
    the tolerance a kernel uses (atol times the reference's rms under a scale-free check)."""
    import torch
    from pytest_kernelbench.rank import compare
    worst = 0.0
    for (_, o), (_, e) in zip(compare.leaves(out), compare.leaves(expected)):
        if not (isinstance(e, torch.Tensor) and isinstance(o, torch.Tensor) and e.is_floating_point()
                and o.shape == e.shape and e.numel()):
            continue
        o, e = compare.dense(o).to(torch.float64), compare.dense(e).to(torch.float64)
        finite = torch.isfinite(e) & torch.isfinite(o)
        if not bool(finite.any()):
            continue
        o, e = o[finite], e[finite]
        atol = tol["atol"] * (float(e.square().mean().sqrt()) if scale_free else 1.0)
        bound = atol + tol["rtol"] * e.abs()
        ratio = (o - e).abs() / bound
        worst = max(worst, float(torch.where(bound > 0, ratio, (o != e).double() * float("inf")).max()))
    return worst


def _distance(out, expected) -> float:
    """The largest |out - expected| over the tensors (inf where NaN, Inf or dtype differ)."""
    import torch
    from pytest_kernelbench.rank import compare
    worst = 0.0
    for (_, o), (_, e) in zip(compare.leaves(out), compare.leaves(expected)):
        if not isinstance(e, torch.Tensor):
            worst = max(worst, 0.0 if o == e else float("inf"))
        elif o.dtype != e.dtype:
            worst = float("inf")
        elif not compare._same_bits(o, e):
            wide = torch.complex128 if e.is_complex() else torch.float64
            o, e = compare.dense(o).to(wide), compare.dense(e).to(wide)
            d = (o - e).abs()
            d = torch.where(torch.isnan(d) & ~torch.isnan(e.abs()), float("inf"), d)
            worst = max(worst, float(torch.nan_to_num(d, nan=0.0).max()) if d.numel() else 0.0)
    return worst


def merge(everyone: list, world: int) -> dict:
    """Rank 0's record: per scale and kernel, the verdict over the judged ranks. A planted kernel
    that lands within twice the honest kernels' spread (or on the reference's bits) is not wrong
    for that problem at that scale: n/a."""
    first = everyone[0]
    if "error" in first or any("error" in e for e in everyone):
        return {"error": next(e["error"] for e in everyone if "error" in e)}
    merged: dict = {"world": first["world"]}
    for name, row in first.items():
        if name == "world":
            continue
        if isinstance(row, str):
            merged[name] = row
            continue
        merged[name] = {}
        # the honest kernels' spread: those the checker passed on every rank (one it fails, or one
        # of another structure, says nothing of how far an honest kernel may land)
        passing = [k for k in row if k.startswith("honest")
                   and not any(everyone[q][name][k]["me"][0] == "error" or everyone[q][name][k]["me"][1] for q in range(world))]
        spread = max([everyone[q][name][k]["me"][0] for q in range(world) for k in passing], default=0.0)
        for kind, cell in row.items():
            views = [everyone[q][name][kind]["me"] for q in cell["judged"]]
            if any(v[0] == "error" for v in views):
                status, msg = "error", next(v[2] for v in views if v[0] == "error")
            else:
                differs = max((v[0] for v in views), default=0.0) > 2 * spread
                flagged = [v for v in views if v[1]]
                msg = flagged[0][2] if flagged else ""
                if kind.startswith("honest") or kind == "fp32_vs_native":
                    status = "failed" if flagged else "passed"
                    margin = None if any(v[3] is None for v in views) else max(v[3] for v in views)
                else:
                    status = "caught" if flagged else "MISSED" if differs else "n/a"
            merged[name][kind] = {"status": status, "message": msg}
            if status in ("passed", "failed") and margin is not None:
                merged[name][kind]["margin"] = round(margin, 4)
    return merged


# ---- the table ------------------------------------------------------------------------------
def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        r, w, port, out, ids, scales, size = sys.argv[2:9]
        worker(int(r), int(w), int(port), out, ids.split(","), scales.split(","), size)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="*", help="comma-separated globs over problem ids")
    ap.add_argument("--scales", default=",".join(SCALES))
    ap.add_argument("--json")
    ap.add_argument("--md")
    ap.add_argument("--before", help="a JSON {problem id: rule} of the rules before a change (the table's 'before')")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--size", default="tiny", help="the size to run (calibration at GPU sizes: small)")
    ap.add_argument("--world", type=int, help="the world size, where a problem allows it (default: 2, else its smallest)")
    ap.add_argument("--from-json", help="the table from an earlier --json (no run)")
    ap.add_argument("--also-world", type=int, help="with --md: the reduction problems again at this world size (8: the "
                                                   "widest spread of honest orders), a second table")
    a = ap.parse_args()
    chosen = problems(a.problems.split(","))
    scales = a.scales.split(",")
    t0 = time.monotonic()
    results = json.loads(Path(a.from_json).read_text()) if a.from_json else run_jobs(chosen, scales, a.timeout, a.size, a.world)
    took = time.monotonic() - t0
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    if a.md:
        from oracle_table import HEADER, table
        before = json.loads(Path(a.before).read_text()) if a.before else {}
        doc = HEADER.format(date=datetime.date.today().isoformat(), took=took, cpus=os.cpu_count()) + \
            table(chosen, results, scales, before, f"Size {a.size}, W = 2 (else the smallest the problem allows)",
                  reduction, rule)
        if a.also_world:
            wide = [p for p in chosen if reduction(p) and a.also_world in p.world_sizes]
            more = run_jobs(wide, scales, a.timeout, a.size, a.also_world)
            doc += "\n" + table(wide, more, scales, before, f"Size {a.size}, W = {a.also_world}: the reduction problems",
                                 reduction, rule)
        Path(a.md).write_text(doc)
    if not a.json and not a.md:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
