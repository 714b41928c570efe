"""Where a job's fixed cost goes on one GPU (issue 21): a process's CUDA context and NCCL group at
W = 1, alone and three at once (a job's checker and its two solver processes); how long the kernel
takes to reap a process that exits holding them, as it is and after tearing parts down first; and
the checker's per-set cost of fresh inputs (a new generator per set against one reseeded).

    python bench/exit_probe.py [--trials 3] [--alloc-gib 4] [--parts exits,together,sets]

A benchmark, not a test. Prints a table per part; run it on the GPU machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = ("as-is", "destroy", "empty-cache", "ctx-reset", "destroy+ctx-reset")


def child(variant: str, alloc_gib: float) -> None:
    t0 = time.time()
    import torch
    import torch.distributed as dist
    t_import = time.time()
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    torch.zeros(1, device=dev)
    t_ctx = time.time()
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=dev)
    x = torch.ones(1024, device=dev)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    t_group = time.time()
    held = [torch.empty(int(alloc_gib * (1 << 30)) // 8, dtype=torch.float64, device=dev)] if alloc_gib else []
    torch.cuda.synchronize()
    t_teardown = time.time()
    if "destroy" in variant:
        dist.destroy_process_group()
    if variant == "empty-cache":
        del held[:]
        torch.cuda.empty_cache()
    if "ctx-reset" in variant:
        import ctypes
        cuda = ctypes.CDLL("libcuda.so.1")
        d = ctypes.c_int()
        assert cuda.cuDeviceGet(ctypes.byref(d), 0) == 0
        rc = cuda.cuDevicePrimaryCtxReset_v2(d)
        assert rc == 0, rc
    t_exit = time.time()
    print(json.dumps({"import": t_import - t0, "ctx": t_ctx - t_import, "group": t_group - t_ctx,
                      "teardown": t_exit - t_teardown, "exit_at": t_exit}), flush=True)
    os._exit(0)


def spawn(variant: str, alloc_gib: float, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--child", variant, "--alloc-gib", str(alloc_gib)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def finish(p: subprocess.Popen) -> dict:
    lines = []
    for line in p.stdout:        # NCCL_DEBUG's lines come on stdout too: the facts are the '{' line
        lines.append(line)
        if line.startswith("{"):
            break
    p.wait()
    reaped = time.time()
    err = "".join(lines) + p.stdout.read() + p.stderr.read()
    try:
        facts = json.loads(lines[-1])
    except (ValueError, IndexError):
        raise SystemExit(f"child failed: {err[-2000:]}") from None
    facts["reap"] = reaped - facts.pop("exit_at")
    facts["stderr"] = err
    return facts


def ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1e3:7.1f}"


def exits(trials: int, alloc_gib: float) -> None:
    print("\n| variant | import ms | context ms | NCCL group ms | teardown before exit ms | exit to reaped ms | "
          "teardown + reap ms |")
    print("|---|---|---|---|---|---|---|")
    for v in VARIANTS:
        rows = [finish(spawn(v, alloc_gib)) for _ in range(trials)]
        print(f"| {v} | {ms([r['import'] for r in rows])} | {ms([r['ctx'] for r in rows])} | "
              f"{ms([r['group'] for r in rows])} | {ms([r['teardown'] for r in rows])} | {ms([r['reap'] for r in rows])} | "
              f"{ms([r['teardown'] + r['reap'] for r in rows])} |")


def together(trials: int, alloc_gib: float) -> None:
    print("\n| three processes at once | context ms (each) | NCCL group ms (each) | exit to reaped ms (each) |")
    print("|---|---|---|---|")
    for _ in range(trials):
        ps = [spawn("as-is", alloc_gib) for _ in range(3)]
        rows = [finish(p) for p in ps]
        cells = [" / ".join(f"{r[key] * 1e3:.0f}" for r in rows) for key in ("ctx", "group", "reap")]
        print(f"| trial | {' | '.join(cells)} |")
    r = finish(spawn("as-is", 0, {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT"}))
    print("\nNCCL's own init lines (one process alone):")
    for ln in r["stderr"].splitlines():
        if any(k in ln for k in ("timings", "Init COMPLETE", "NCCL version", "comm ")):
            print("   ", ln.strip()[-220:])


def fresh_sets(n_sets: int = 64, numel: int = 4096) -> None:
    import hashlib

    import torch
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from pytest_kernelbench.harnesslib import exact_values
    dev = torch.device("cuda:0")
    slots = [torch.empty(numel, dtype=torch.bfloat16, device=dev) for _ in range(n_sets)]

    def seed(k: int) -> int:
        return int.from_bytes(hashlib.sha256(f"nonce|p|s|round{k}|0".encode()).digest()[:8], "little") & ((1 << 63) - 1)

    def new_gen(r: int) -> None:
        for k in range(n_sets):
            g = torch.Generator(device=dev)
            g.manual_seed(seed(r * n_sets + k))
            slots[k].copy_(exact_values((numel,), g, dev, torch.bfloat16))
        torch.cuda.synchronize()

    shared = torch.Generator(device=dev)

    def reseed(r: int) -> None:
        for k in range(n_sets):
            shared.manual_seed(seed(r * n_sets + k))
            slots[k].copy_(exact_values((numel,), shared, dev, torch.bfloat16))
        torch.cuda.synchronize()

    print(f"\n| fresh inputs, {n_sets} sets of {numel} bf16 | us per set |")
    print("|---|---|")
    for name, fn in (("a new generator per set", new_gen), ("one generator, reseeded", reseed)):
        fn(0)
        t = time.perf_counter()
        for r in range(1, 21):
            fn(r)
        print(f"| {name} | {(time.perf_counter() - t) / (20 * n_sets) * 1e6:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child")
    ap.add_argument("--alloc-gib", type=float, default=4.0)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--parts", default="exits,together,sets")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.alloc_gib)
        return
    parts = a.parts.split(",")
    if "exits" in parts:
        exits(a.trials, a.alloc_gib)
    if "together" in parts:
        together(a.trials, a.alloc_gib)
    if "sets" in parts:
        fresh_sets()


if __name__ == "__main__":
    main()
