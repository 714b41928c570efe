#!/usr/bin/env python3
"""Dev / bench tool for the hand-written symm_mem collective solutions.

Standalone torchrun script, separate from the plugin's harness:

    python3 -m torch.distributed.run --standalone --nproc-per-node W bench/kernels_dev.py \
        [--ops all_reduce,all_gather,reduce_scatter,all_to_all] [--sizes 2048,524288,...] \
        [--variants all|auto|"a=1;a=1,g=132"] [--json out.json] [--facts] [--cpu-dry-run]
    python3 bench/kernels_dev.py --prebuild [ops]     # compile the four extensions in parallel
    python3 bench/kernels_dev.py --summarize a.json b.json   # compact table from --json files

For every op, size and variant it
  - checks the candidate against the NCCL reference on fresh random rank-dependent inputs
    (3 consecutive calls with new inputs, then back-to-back calls cycling over 4 input
    buffers whose outputs are all kept and checked afterwards; x must stay unchanged),
  - times NCCL (written the way reference.py writes it) and the candidate with CUDA events:
    warm-up, then 7 rounds of N back-to-back calls, max over ranks per round, median,
  - prints a table: op, W, size, variant, nccl_us, cand_us, speedup, busbw (GB/s, nccl-tests
    factors), check result.
Finally it runs a mixed-size back-to-back sequence through every solution's default choice.

Reductions use values that are multiples of 1/8 in [-4, 4] (as the problems' harness does),
so every summation order gives identical bits and all checks are exact.
Variant syntax: "a=<algo id>,g=<blocks>,k=<rounds per block>,f=<0|1 fence>,x=<dev flags:
1 = 8-rank kernel at any W, 2 = scalar kernel>"; "auto" = the
solution's own choice; a "#tag" suffix is ignored (to time a variant twice).
"""
import argparse
import datetime
import importlib.util
import json
import os
import statistics
import sys
import time
import warnings
import zlib

os.environ.setdefault("KB_SPIN_TIMEOUT_S", "20")
warnings.filterwarnings("ignore", category=FutureWarning)

import torch  # noqa: E402 - after the environment above
import torch.distributed as dist  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"]
DEFAULT_SIZES = [1000, 1001, 2048, 4096, 4100, 65536, 262144, 524288, 8388608, 134217728]
VARIANTS = {  # "auto#2" times the default a second time (noise estimate)
    "all_reduce": ["auto", "a=0", "a=1", "a=2", "a=3", "auto,f=1", "auto#2"],
    "all_gather": ["auto", "a=0", "a=1", "auto,f=1", "auto#2"],
    "reduce_scatter": ["auto", "a=0", "a=1", "auto,f=1", "auto#2"],
    "all_to_all": ["auto", "a=0", "a=1", "auto,f=1", "auto#2"],
}
LARGE_EXTRA = {  # rounds-per-block sweeps at >= 64 MiB
    "all_reduce": ["a=1,k=2", "a=3,k=4"],
    "all_gather": ["a=0,k=1", "a=0,k=2", "a=0,k=8", "a=1,k=8"],
    "reduce_scatter": ["a=0,k=1", "a=0,k=2", "a=0,k=8"],
    "all_to_all": ["a=0,k=1", "a=0,k=2", "a=0,k=8"],
}
SMALL_EXTRA = {  # code paths for W=8 (x=1: 8-rank kernel) and odd sizes (x=2: scalar kernel)
    "all_reduce": ["x=1", "a=1,x=1", "a=2,x=1", "a=3,x=1", "x=2", "a=1,x=3"],
    "all_gather": ["x=1", "a=1,x=1", "x=2", "a=1,x=3"],
    "reduce_scatter": ["x=1", "a=1,x=1", "x=2", "a=1,x=3"],
    "all_to_all": ["x=1", "a=1,x=1", "x=2", "a=1,x=3"],
}
MID_EXTRA = {  # grid / rounds sweeps at 1 MiB
    "all_reduce": ["a=1,g=64", "a=1,k=2"],
    "all_gather": ["a=0,g=264", "a=0,k=2"],
    "reduce_scatter": ["a=0,g=64"],
    "all_to_all": ["a=0,g=64"],
}


def log(*a):
    if dist.get_rank() == 0:
        print(*a, flush=True)


DRY = False   # --cpu-dry-run: gloo on CPU, reference.py stands in for the solution


def load_solution(op):
    path = os.path.join(ROOT, "problems", "collective", op, "solutions", "symm_mem.py")
    if DRY:
        path = os.path.join(ROOT, "problems", "collective", op, "reference.py")
    spec = importlib.util.spec_from_file_location("kb_symm_" + op, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def make_input(op, n, seed, rank, device):
    gen = torch.Generator(device=device)
    gen.manual_seed((seed * 1000003 + rank * 7919 + n) % (2 ** 62))
    x = torch.randn(n, generator=gen, device=device, dtype=torch.float32)
    if op in ("all_reduce", "reduce_scatter"):
        x = x.mul_(8).round_().clamp_(-32, 32).div_(8)
    return x.to(torch.bfloat16)


def nccl_ref(op, x):
    w = dist.get_world_size()
    if op == "all_reduce":
        out = x.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
    elif op == "all_gather":
        out = x.new_empty(w * x.numel())
        dist.all_gather_into_tensor(out, x)
    elif op == "reduce_scatter":
        out = x.new_empty(x.numel() // w)
        dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.SUM)
    else:
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x)
    return out


def busbw_factor(op, w, n):
    nbytes = 2 * n
    if op == "all_reduce":
        return 2 * (w - 1) / w * nbytes
    if op == "all_gather":
        return (w - 1) / w * w * nbytes
    return (w - 1) / w * nbytes


def all_ok(ok):
    t = torch.tensor([1 if ok else 0], device="cpu" if DRY else "cuda", dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def set_variant(mod, spec):
    mod.ALGO, mod.GRID, mod.FENCE, mod.NCHUNK, mod.DEV_FLAGS = None, None, 0, None, 0
    for part in spec.split("#")[0].split(","):
        part = part.strip()
        if part in ("", "auto"):
            continue
        k, v = part.split("=")
        if k == "a":
            mod.ALGO = int(v)
        elif k == "g":
            mod.GRID = int(v)
        elif k == "f":
            mod.FENCE = int(v)
        elif k == "k":
            mod.NCHUNK = int(v)
        elif k == "x":
            mod.DEV_FLAGS = int(v)
        else:
            raise ValueError(spec)


def same(out, ref):
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return False, "shape/dtype %s %s vs %s %s" % (tuple(out.shape), out.dtype, tuple(ref.shape), ref.dtype)
    if torch.equal(out, ref):
        return True, ""
    d = (out.float() - ref.float()).abs()
    bad = int((d > 0).sum().item())
    first = int((d > 0).nonzero()[0].item())
    return False, "mismatch: %d elems differ, max abs %.4g, first bad idx %d" % (bad, d.max().item(), first)


def check_variant(op, mod, n, rank, device, seed):
    """Returns (ok, message). Every rank makes the same calls whatever happens."""
    msgs = []
    # 1) consecutive calls with fresh inputs
    for k in range(3):
        x = make_input(op, n, seed + 100 + k, rank, device)
        x0 = x.clone()
        ref = nccl_ref(op, x)
        out = mod.solution(x)
        ok, m = same(out, ref)
        if not ok:
            msgs.append("fresh call %d: %s" % (k, m))
        if not torch.equal(x, x0):
            msgs.append("fresh call %d: x was modified" % k)
        if out.data_ptr() == x.data_ptr():
            msgs.append("output aliases x")
    # 1b) rank 0 passes a contiguous but misaligned x (storage offset 1): per-call scalar path
    if 2 * n <= (1 << 20):
        x = make_input(op, n, seed + 150, rank, device)
        if rank == 0:
            big = torch.empty(n + 8, dtype=x.dtype, device=device)
            big[1:n + 1].copy_(x)
            x = big[1:n + 1]
        ref = nccl_ref(op, x.clone())
        out = mod.solution(x)
        ok, m = same(out, ref)
        if not ok:
            msgs.append("misaligned x on rank 0: %s" % m)
    # 2) back-to-back calls cycling over 4 inputs, outputs kept, checked afterwards
    xs = [make_input(op, n, seed + 200 + i, rank, device) for i in range(4)]
    x0s = [x.clone() for x in xs]
    refs = [nccl_ref(op, x) for x in xs]
    sync()
    reps = 8 if n >= 2 ** 26 else 16
    outs = [mod.solution(xs[i % 4]) for i in range(reps)]
    sync()
    for i, out in enumerate(outs):
        ok, m = same(out, refs[i % 4])
        if not ok:
            msgs.append("back-to-back call %d: %s" % (i, m))
            break
    ptrs = {o.data_ptr() for o in outs}
    if len(ptrs) != len(outs):
        msgs.append("outputs share storage across calls")
    for x, x0 in zip(xs, x0s):
        if not torch.equal(x, x0):
            msgs.append("back-to-back: x was modified")
            break
    del outs, refs
    return not msgs, "; ".join(msgs)


def sync():
    if not DRY:
        torch.cuda.synchronize()


def bench(fn, xs, iters, rounds=7, warmup=5):
    if DRY:
        iters, rounds, warmup = 2, 2, 1
    for i in range(warmup):
        fn(xs[i % len(xs)])
    sync()
    times = []
    for _ in range(rounds):
        dist.barrier()
        sync()
        if DRY:
            t0 = time.perf_counter()
            for i in range(iters):
                fn(xs[i % len(xs)])
            us = (time.perf_counter() - t0) * 1e6 / iters
        else:
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            for i in range(iters):
                fn(xs[i % len(xs)])
            e1.record()
            e1.synchronize()
            us = e0.elapsed_time(e1) * 1000.0 / iters
        t = torch.tensor([us], device="cpu" if DRY else "cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(t.item())
    return statistics.median(times), times


def iters_for(n):
    b = 2 * n
    if b <= (1 << 20):
        return 100
    if b <= (16 << 20):
        return 40
    return 8


def mixed_sizes(mods, sizes, rank, device):
    """Back-to-back calls over several sizes and every op, defaults, checked at the end."""
    seq = []
    w = dist.get_world_size()
    for _rep in range(2):
        for n in sizes:
            for op in mods:
                if n % w == 0 or op in ("all_reduce", "all_gather"):
                    seq.append((op, n))
    inputs, refs = [], []
    for j, (op, n) in enumerate(seq):
        x = make_input(op, n, 9000 + j, rank, device)
        inputs.append(x)
        refs.append(nccl_ref(op, x))
    for mod in mods.values():
        set_variant(mod, "auto")
    sync()
    outs = [mods[op].solution(x) for (op, n), x in zip(seq, inputs)]
    sync()
    msgs = []
    for (op, n), out, ref in zip(seq, outs, refs):
        ok, m = same(out, ref)
        if not ok:
            msgs.append("%s n=%d: %s" % (op, n, m))
    return not msgs, "; ".join(msgs)


def api_facts(device):
    import torch.distributed._symmetric_memory as symm_mem
    facts = {"torch": torch.__version__, "cuda": torch.version.cuda,
             "nccl": ".".join(map(str, torch.cuda.nccl.version())),
             "device": torch.cuda.get_device_name(device)}
    facts["symm_mem_module"] = sorted(a for a in dir(symm_mem) if not a.startswith("__"))
    try:
        facts["torch.ops.symm_mem"] = sorted(a for a in dir(torch.ops.symm_mem) if not a.startswith("_"))
    except Exception as e:  # noqa
        facts["torch.ops.symm_mem"] = repr(e)
    t = symm_mem.empty(4096, dtype=torch.uint8, device=device)
    h = symm_mem.rendezvous(t, dist.group.WORLD.group_name)
    facts["handle_attrs"] = sorted(a for a in dir(h) if not a.startswith("__"))
    facts["rank/world"] = (h.rank, h.world_size)
    bp = list(h.buffer_ptrs)
    facts["data_ptr - buffer_ptrs[rank]"] = t.data_ptr() - bp[h.rank]
    try:
        facts["signal_pad_ptrs - buffer_ptrs"] = [s - b for s, b in zip(h.signal_pad_ptrs, bp)]
    except Exception as e:  # noqa
        facts["signal_pad_ptrs"] = repr(e)
    for a in ("buffer_size", "signal_pad_size"):
        try:
            facts[a] = getattr(h, a)
        except Exception as e:  # noqa
            facts[a] = repr(e)
    try:
        facts["get_signal_pad_size()"] = symm_mem.get_signal_pad_size()
    except Exception as e:  # noqa
        facts["get_signal_pad_size()"] = repr(e)
    t2 = symm_mem.empty(4096, dtype=torch.uint8, device=device)
    h2 = symm_mem.rendezvous(t2, dist.group.WORLD.group_name)
    facts["second small alloc: data_ptr - buffer_ptrs[rank]"] = t2.data_ptr() - list(h2.buffer_ptrs)[h2.rank]
    facts["second small alloc: same block as first"] = list(h2.buffer_ptrs)[h2.rank] == bp[h.rank]
    t0 = time.time()
    h.barrier()
    torch.cuda.synchronize()
    facts["handle.barrier() ok (s)"] = round(time.time() - t0, 4)
    return facts


def prebuild(ops):
    """Compile every solution's extension in parallel processes (no process group needed)."""
    import subprocess
    procs = {}
    t0 = time.time()
    for op in ops:
        path = os.path.join(ROOT, "problems", "collective", op, "solutions", "symm_mem.py")
        code = ("import importlib.util as u, time; t = time.time(); "
                "s = u.spec_from_file_location('m', %r); m = u.module_from_spec(s); "
                "s.loader.exec_module(m); print('built in %%.1f s' %% (time.time() - t))" % path)
        procs[op] = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
    rc = 0
    for op, pr in procs.items():
        out, _ = pr.communicate()
        rc |= pr.returncode
        print("[prebuild %s rc=%d]\n%s" % (op, pr.returncode, out.strip()[-3000:]), flush=True)
    print("prebuild wall %.1f s" % (time.time() - t0), flush=True)
    return rc


def summarize(files):
    """Compact table: per (op, W, size) the NCCL time, the solution's default and the best variant."""
    print("%-14s %1s %9s %8s %8s %6s %-12s %8s %6s %s" % (
        "op", "W", "bytes", "nccl_us", "auto_us", "x", "best", "best_us", "x", "checks"))
    for f in files:
        try:
            d = json.load(open(f))
        except Exception as e:  # noqa
            print("cannot read %s: %r" % (f, e))
            continue
        groups = {}
        for r in d["rows"]:
            groups.setdefault((r["op"], r["W"], r["bytes"]), []).append(r)
        for (op, w, b), rs in groups.items():
            auto = [r for r in rs if r["variant"] == "auto"]
            a = auto[0] if auto else rs[0]
            okr = [r for r in rs if r["ok"]] or rs
            best = min(okr, key=lambda r: r["cand_us"])
            bad = [r["variant"] for r in rs if not r["ok"]]
            print("%-14s %1d %9d %8.1f %8.1f %6.2f %-12s %8.1f %6.2f %s" % (
                op, w, b, a["nccl_us"], a["cand_us"], a["speedup"], best["variant"], best["cand_us"],
                best["speedup"], "ok" if not bad else "FAIL:" + "|".join(bad)))
        print("mixed-size sequence: %s" % ("ok" if d.get("mixed_ok") else "FAIL"))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--prebuild":
        sys.exit(prebuild(sys.argv[2].split(",") if len(sys.argv) > 2 else OPS))
    if len(sys.argv) > 1 and sys.argv[1] == "--summarize":
        summarize(sys.argv[2:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)))
    ap.add_argument("--variants", default="all", help='all | auto | "spec;spec;..."')
    ap.add_argument("--no-large-extra", action="store_true")
    ap.add_argument("--json", default="")
    ap.add_argument("--facts", action="store_true")
    ap.add_argument("--cpu-dry-run", action="store_true", help="test this script's logic on gloo")
    args = ap.parse_args()

    global DRY
    DRY = args.cpu_dry_run
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if DRY:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    else:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device, timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    ops = [o for o in args.ops.split(",") if o]
    sizes = [int(s) for s in args.sizes.split(",") if s]

    t0 = time.time()
    mods = {op: load_solution(op) for op in ops}
    log("# W=%d loaded %s in %.1f s" % (world, ",".join(ops), time.time() - t0))
    if args.facts:
        try:
            f = api_facts(device)
        except Exception as e:  # noqa
            f = {"error": repr(e)}
        log("# API facts: " + json.dumps(f, default=str))

    rows = []
    hdr = "%-15s %2s %10s %-12s %9s %9s %8s %9s %9s  %s" % (
        "op", "W", "bytes", "variant", "nccl_us", "cand_us", "speedup", "bw_cand", "bw_nccl", "check")
    log(hdr)
    for op in ops:
        mod = mods[op]
        for n in sizes:
            if n % world and op in ("reduce_scatter", "all_to_all"):
                continue
            xs = [make_input(op, n, 1 + i, rank, device) for i in range(4)]
            iters = iters_for(n)
            t_nccl, _ = bench(lambda x, op=op: nccl_ref(op, x), xs, iters)
            if args.variants == "all":
                vs = list(VARIANTS[op])
                if 2 * n <= (1 << 20) and not args.no_large_extra:
                    vs += SMALL_EXTRA[op]
                if 2 * n >= (64 << 20) and not args.no_large_extra:
                    vs += LARGE_EXTRA[op]
                if 2 * n == (1 << 20) and not args.no_large_extra:
                    vs += MID_EXTRA[op]
            elif args.variants == "auto":
                vs = ["auto"]
            else:
                vs = [v for v in args.variants.split(";") if v]
            for v in vs:
                set_variant(mod, v)
                try:
                    ok, msg = check_variant(op, mod, n, rank, device, seed=zlib.crc32(("%s%d%s" % (op, n, v)).encode()) % 100000)
                except Exception as e:  # a failure here is not a rank divergence: every rank raises
                    ok, msg = False, "exception: %r" % (e,)
                ok = all_ok(ok)
                t_c, times = bench(mod.solution, xs, iters)
                fac = busbw_factor(op, world, n)
                row = dict(op=op, W=world, n=n, bytes=2 * n, variant=v, nccl_us=t_nccl, cand_us=t_c,
                           speedup=t_nccl / t_c, busbw_cand=fac / t_c / 1e3, busbw_nccl=fac / t_nccl / 1e3,
                           ok=ok, msg=msg, rounds=times)
                rows.append(row)
                log("%-15s %2d %10d %-12s %9.1f %9.1f %8.2f %9.1f %9.1f  %s" % (
                    op, world, 2 * n, v, t_nccl, t_c, t_nccl / t_c, row["busbw_cand"], row["busbw_nccl"],
                    "ok" if ok else "FAIL " + msg[:300]))
                if not ok and msg:
                    print("[rank %d] %s n=%d %s: %s" % (rank, op, n, v, msg), flush=True)
            del xs
            if not DRY:
                torch.cuda.empty_cache()

    ok, msg = mixed_sizes(mods, [s for s in sizes if 2 * s <= (16 << 20)], rank, device)
    ok = all_ok(ok)
    log("# mixed-size back-to-back sequence over %s: %s %s" % (",".join(ops), "ok" if ok else "FAIL", msg[:500]))
    if not ok:
        print("[rank %d] mixed: %s" % (rank, msg), flush=True)
    if args.json and rank == 0:
        with open(args.json, "w") as f:
            json.dump(dict(world=world, rows=rows, mixed_ok=ok), f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
