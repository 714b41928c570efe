"""What GPU work a stopped process leaves running does to another process's work, and whether a
short probe before a window sees it (issue 21: work left past "done" that writes no output).

    python bench/linger_probe.py [--out DIR] [--ms 40]

A "foreign" child process (standing in for the candidate process) queues work on the GPU without
waiting for it, says so, and is stopped (SIGSTOP, as the checker stops the candidate process at
"done"). Meanwhile this process (standing in for the checker) probes the device again and again:
a one-element kernel and a device synchronize (wall time), and a 2 x L2 zero (the checker's cache
flush before a window
wall and event time), and once a bandwidth-bound copy (how much slower
the reference's window would run). Kinds of foreign work: a one-thread spin (torch.cuda._sleep),
back-to-back matmuls, copy-engine copies device to device and host to device, and a spin queued
behind a stream wait on host memory that this process releases later (a trigger the candidate
could arm on memory the checker writes). A benchmark, not a test: run it on the GPU machine.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KINDS = ("idle", "spin", "matmul", "copy_d2d", "copy_h2d", "wait_then_spin", "timer_primary", "timer_ctx2",
         "poll_primary", "poll_ctx2")
# the linger cheat's kernel (one thread spinning for ns nanoseconds of %globaltimer, reading a word
# of host memory each turn and stopping when it is not 0; a null flag: the timer alone), from its text
LINGER = Path(__file__).resolve().parent.parent / "tests" / "cheats" / "gpu_linger.py"
PTX = LINGER.read_text().split('PTX = b"""', 1)[1].split('\\0"""', 1)[0]


def _driver_spins(torch):
    """The PTX spin loaded in the primary context and in a second one: kind -> launch(ns)."""
    import ctypes
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        from cuda import cuda as cu
    err, host = cu.cuMemHostAlloc(4096, cu.CU_MEMHOSTALLOC_PORTABLE | cu.CU_MEMHOSTALLOC_DEVICEMAP)
    err, flag = cu.cuMemHostGetDevicePointer(host, 0)
    ctypes.c_int32.from_address(int(host)).value = 0

    def load() -> object:
        err, mod = cu.cuModuleLoadData(PTX.encode() + b"\0")
        assert int(err) == 0, err
        return cu.cuModuleGetFunction(mod, b"spin")[1]

    primary_fn = load()
    err, dev = cu.cuDeviceGet(torch.cuda.current_device())
    try:
        err, ctx = cu.cuCtxCreate(None, 0, dev)
    except TypeError:
        err, ctx = cu.cuCtxCreate(0, dev)
    ctx2_fn = load()
    err, ctx2_stream = cu.cuStreamCreate(1)
    cu.cuCtxPopCurrent()

    def launch(fn, stream, ns, poll, push=None):
        if push is not None:
            cu.cuCtxPushCurrent(push)
        args = ((int(flag) if poll else 0, int(ns)), (ctypes.c_void_p, ctypes.c_uint64))
        err, = cu.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, stream, args, 0)
        if push is not None:
            cu.cuCtxPopCurrent()
        assert int(err) == 0, err

    cur = lambda: cu.CUstream(torch.cuda.current_stream().cuda_stream)  # noqa: E731
    return {"timer_primary": lambda ns: launch(primary_fn, cur(), ns, False),
            "timer_ctx2": lambda ns: launch(ctx2_fn, ctx2_stream, ns, False, ctx),
            "poll_primary": lambda ns: launch(primary_fn, cur(), ns, True),
            "poll_ctx2": lambda ns: launch(ctx2_fn, ctx2_stream, ns, True, ctx)}


def child(flag_path: str) -> None:
    import torch
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn) -> float:
        s.record()
        fn()
        e.record()
        e.synchronize()
        return s.elapsed_time(e)

    cycles_per_ms = 10_000_000 / timed(lambda: torch.cuda._sleep(10_000_000))
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        mm_ms = timed(lambda: a @ a)
    big = torch.empty(2 << 30, dtype=torch.uint8, device=dev)
    big2 = torch.empty_like(big)
    d2d_ms = timed(lambda: big2.copy_(big, non_blocking=True))
    host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    h2d_ms = timed(lambda: dst.copy_(host, non_blocking=True))
    fd = os.open(flag_path, os.O_RDWR)
    flag = mmap.mmap(fd, 4096)
    waiter = None
    try:
        try:
            from cuda.bindings import driver as cu
        except ImportError:
            from cuda import cuda as cu        # older cuda-python
        import ctypes
        addr = ctypes.addressof(ctypes.c_char.from_buffer(flag))
        err, = cu.cuMemHostRegister(addr, 4096, cu.CU_MEMHOSTREGISTER_DEVICEMAP | cu.CU_MEMHOSTREGISTER_PORTABLE)
        err2, dptr = cu.cuMemHostGetDevicePointer(addr, 0)
        if int(err) == 0 and int(err2) == 0:
            def waiter(value: int) -> None:
                stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
                r, = cu.cuStreamWaitValue32(stream, dptr, value, cu.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_EQ)
                assert int(r) == 0, r
        else:
            print(f"host register failed: {err} {err2}", file=sys.stderr)
    except Exception as ex:  # noqa: BLE001
        print(f"no stream wait: {type(ex).__name__}: {ex}", file=sys.stderr)
    try:
        spins = _driver_spins(torch)
    except Exception as ex:  # noqa: BLE001
        print(f"no driver spins: {type(ex).__name__}: {ex}", file=sys.stderr)
        spins = {}
    print(json.dumps({"driver_spins": sorted(spins), "cycles_per_ms": cycles_per_ms, "matmul_ms": mm_ms, "copy_d2d_2GiB_ms": d2d_ms,
                      "copy_h2d_1GiB_ms": h2d_ms, "stream_wait": waiter is not None}), flush=True)
    torch.cuda.synchronize()
    for line in sys.stdin:
        kind, ms = line.split()[0], float(line.split()[1]) if len(line.split()) > 1 else 0.0
        if kind == "sync":
            torch.cuda.synchronize()
            print("synced", flush=True)
            continue
        if kind == "spin":
            torch.cuda._sleep(int(ms * cycles_per_ms))
        elif kind == "matmul":
            for _ in range(max(1, round(ms / mm_ms))):
                a @ a
        elif kind == "copy_d2d":
            for _ in range(max(1, round(ms / d2d_ms))):
                big2.copy_(big, non_blocking=True)
        elif kind == "copy_h2d":
            for _ in range(max(1, round(ms / h2d_ms))):
                dst.copy_(host, non_blocking=True)
        elif kind in spins:
            spins[kind](ms * 1e6)
        elif kind == "wait_then_spin" and waiter is not None:
            waiter(1)
            torch.cuda._sleep(int(ms * cycles_per_ms))
        print("launched", flush=True)      # nothing waited for: the work runs on


def parent(args: argparse.Namespace) -> None:
    import torch
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    flush = torch.empty(2 * l2, dtype=torch.uint8, device=dev)
    one = torch.zeros(1, device=dev)
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def tiny() -> float:
        t = time.perf_counter()
        one.add_(1)
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e6

    def flushed() -> tuple[float, float]:
        t = time.perf_counter()
        s.record()
        flush.zero_()
        e.record()
        e.synchronize()
        return (time.perf_counter() - t) * 1e6, s.elapsed_time(e) * 1e3

    def copy_ms() -> float:
        s.record()
        for _ in range(4):
            dst.copy_(src)
        e.record()
        e.synchronize()
        return s.elapsed_time(e)

    for _ in range(50):
        tiny()
        flushed()
    base_copy = statistics.median(copy_ms() for _ in range(5))
    fd, flag_path = tempfile.mkstemp(dir="/dev/shm")
    os.ftruncate(fd, 4096)
    flag = mmap.mmap(fd, 4096)
    proc = subprocess.Popen([sys.executable, __file__, "--child", flag_path], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    info = json.loads(proc.stdout.readline())
    print("foreign:", info, flush=True)
    results = {"foreign": info, "base_copy_4GiB_ms": base_copy, "kinds": {}}
    print("| kind | trial | probes | tiny p50 us | tiny max us | probes > 200 us | first fast ms | flush gpu p50 us "
          "| copy slowdown | trigger ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind in args.kinds.split(","):
        if kind == "wait_then_spin" and not info["stream_wait"]:
            continue
        flag[:4] = (0).to_bytes(4, "little")
        for trial in range(args.trials):
            proc.stdin.write(f"{kind} {args.ms}\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "launched"
            t0 = time.perf_counter()
            os.kill(proc.pid, signal.SIGSTOP)
            samples, copies, released = [], [], None
            end = args.ms * (2.5 if kind == "wait_then_spin" else 1.5) / 1e3
            if args.gap_ms:                   # probes after idle gaps: the scheduler's state when one comes
                time.sleep(args.gap_ms / 1e3)
            while time.perf_counter() - t0 < end:
                now = time.perf_counter() - t0
                if args.gap_ms and samples:
                    time.sleep(args.gap_ms / 1e3)
                if kind == "wait_then_spin" and released is None and now > args.ms / 1e3:
                    flag[:4] = (1).to_bytes(4, "little")     # the trigger: memory the checker writes
                    released = now
                if not copies and now > 0.005:
                    copies.append((now, copy_ms()))
                    continue
                fw, fg = flushed()
                samples.append((time.perf_counter() - t0, tiny(), fw, fg))
            os.kill(proc.pid, signal.SIGCONT)
            proc.stdin.write("sync\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "synced"
            flag[:4] = (0).to_bytes(4, "little")
            after = [tiny() for _ in range(20)]
            rec = {"samples": [[round(x, 5) if i == 0 else round(x, 1) for i, x in enumerate(r)] for r in samples],
                   "copy": copies, "released_s": released, "after_us": after}
            results["kinds"].setdefault(kind, []).append(rec)
            tiny_us = [r[1] for r in samples]
            first_fast = next((r[0] for r in samples if r[1] < 200), None)
            slow = sum(1 for x in tiny_us if x > 200)
            print(f"| {kind} | {trial} | {len(samples)} | {statistics.median(tiny_us):.0f} | {max(tiny_us):.0f} | "
                  f"{slow} | {first_fast if first_fast is None else round(first_fast * 1e3, 1)} | "
                  f"{statistics.median(r[3] for r in samples):.0f} | "
                  f"{(copies[0][1] / base_copy) if copies else float('nan'):.2f} | "
                  f"{'' if released is None else round(released * 1e3, 1)} |", flush=True)
    proc.stdin.close()
    proc.wait(10)
    os.unlink(flag_path)
    path = os.path.join(args.out, f"linger-probe-gap{args.gap_ms:g}.json")
    with open(path, "w") as f:
        json.dump(results, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child")
    ap.add_argument("--out", default=".")
    ap.add_argument("--ms", type=float, default=40.0, help="how long the foreign work lasts")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--gap-ms", type=float, default=0.0, help="idle time before the first probe and between probes")
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    if args.child:
        child(args.child)
    else:
        parent(args)


if __name__ == "__main__":
    main()
