"""Measure the machine's ceilings on the GPUs it is given: per-GPU NVLink bandwidth per direction
(an SM-driven kernel pulling from every peer at once), HBM bandwidth (device copy), dense bf16
matrix rate, and the one-way latency of a flag written into a peer's memory (a device-initiated
ping-pong between two GPUs: no host, launch or copy engine in the loop).

    python -m pytest_kernelbench.metrics.calibrate [--json PATH] [--force]

Across nodes (`inter_node`, run by run.py under --kb-launcher=slurm --kb-nodes >= 2): one task on
each of two nodes exchanges a buffer through the network, the inter-node bandwidth per GPU.

The plugin runs it once per machine in a subprocess (never creating a CUDA context in pytest)
and caches the result on disk, keyed by GPUs, driver and torch; a file lock keeps concurrent
sessions from measuring at the same time. Published figures are printed beside the measurement.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any


from ..protocol import child_pythonpath

if TYPE_CHECKING:
    from types import ModuleType

PULL_KERNEL = r"""
extern "C" __global__ void kb_pull(int4* dst, int n, int nsrc,
    const int4* s0, const int4* s1, const int4* s2, const int4* s3,
    const int4* s4, const int4* s5, const int4* s6) {
  // every thread reads element i from each peer, so all links are busy at once
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
    if (nsrc > 0) dst[i] = s0[i];
    if (nsrc > 1) dst[(long)n + i] = s1[i];
    if (nsrc > 2) dst[2L * n + i] = s2[i];
    if (nsrc > 3) dst[3L * n + i] = s3[i];
    if (nsrc > 4) dst[4L * n + i] = s4[i];
    if (nsrc > 5) dst[5L * n + i] = s5[i];
    if (nsrc > 6) dst[6L * n + i] = s6[i];
  }
}
"""


PINGPONG_KERNEL = r"""
extern "C" __global__ void kb_pingpong(volatile int* mine, volatile int* peer, int iters, int first,
                                       int spin_limit, int* status) {
  // one thread per GPU: `first` writes i into the peer's flag and waits for i in its own, the
  // other answers; a lost partner ends the loop after spin_limit polls instead of hanging
  for (int i = 1; i <= iters; ++i) {
    if (first) { *peer = i; __threadfence_system(); }
    int spins = 0;
    while (*mine < i) { if (++spins > spin_limit) { status[0] = -i; return; } }
    if (!first) { *peer = i; __threadfence_system(); }
  }
  status[0] = iters;
}
"""
CALIBRATION_VERSION = 2     # 2: latency from the device ping-pong (1 timed a host-issued copy)


def _median(xs: Iterable[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def measure(repeats: int = 10) -> dict:
    import torch
    n_gpu = torch.cuda.device_count()
    out: dict = {"gpus": n_gpu, "gpu_model": torch.cuda.get_device_name(0) if n_gpu else None}
    if not n_gpu:
        return out
    dev0 = torch.device("cuda", 0)
    # HBM: a 4 GiB device copy, bytes read + written
    a = torch.empty(1 << 31, dtype=torch.float16, device=dev0)
    b = torch.empty_like(a)
    out["hbm_bw"] = _best_rate(lambda a=a, b=b: b.copy_(a), 2 * a.numel() * a.element_size(), repeats)
    del a, b
    # dense bf16 matrix rate on random data
    m = 8192
    x = torch.randn(m, m, device=dev0, dtype=torch.bfloat16)
    y = torch.randn(m, m, device=dev0, dtype=torch.bfloat16)
    out["peak_flops"] = _best_rate(lambda x=x, y=y: torch.mm(x, y), 2 * m ** 3, repeats)
    del x, y
    if n_gpu > 1:
        try:
            out.update(_links(torch, n_gpu, repeats))
        except Exception as e:  # e.g. no NVRTC kernel API in this torch: fall back to published
            out["link_error"] = f"{type(e).__name__}: {e}"
    return out


def _best_rate(fn: Callable[..., object], work: float, repeats: int) -> float:
    import torch
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1000)
    return work / _median(times)


def _links(torch: ModuleType, n_gpu: int, repeats: int) -> dict:
    devs = [torch.device("cuda", i) for i in range(n_gpu)]
    for i in devs:        # a peer copy each way makes torch enable peer access for the pair
        for j in devs:
            if i != j:
                torch.ones(4, device=i).copy_(torch.ones(4, device=j))
    kernel = {}
    for d in devs:
        with torch.cuda.device(d):
            kernel[d.index] = torch.cuda._compile_kernel(PULL_KERNEL, "kb_pull")
    per_peer = 1 << 28                                   # 256 MiB from each peer
    n_vec = per_peer // 16
    src = [torch.ones(per_peer // 2, dtype=torch.float16, device=d) for d in devs]
    peers = {d.index: [s for s in src if s.device != d][:7] for d in devs}
    dst = {d.index: torch.empty(per_peer // 2 * len(peers[d.index]), dtype=torch.float16, device=d) for d in devs}
    nsm = torch.cuda.get_device_properties(0).multi_processor_count

    def pull_all():
        for d in devs:
            with torch.cuda.device(d):
                ps = peers[d.index]
                args = [dst[d.index], n_vec, len(ps)] + ps + [dst[d.index]] * (7 - len(ps))
                kernel[d.index](grid=(nsm * 4, 1, 1), block=(512, 1, 1), args=args)
        for d in devs:
            torch.cuda.synchronize(d)

    pull_all()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        pull_all()
        times.append(time.perf_counter() - t0)
    link_bw = (n_gpu - 1) * per_peer / _median(times)
    return {"link_bw": link_bw, "latency_s": pingpong_latency(torch, devs[0], devs[1])}


def pingpong_latency(torch: ModuleType, a: Any, b: Any, iters: int = 20000, repeats: int = 5) -> float | None:
    """One-way latency between GPUs a and b: a kernel on each (one thread, its own stream),
    passing a counter back and forth through flags in each other's memory (peer access, plain
    stores); the loop's time over 2 x iters, launches amortized over the iterations. a == b runs
    both on one GPU (a smoke test of the code, not of a link). None when a run did not finish."""
    sides = [(a, b, 0), (b, a, 1)]       # (device, peer, first): the answering side starts first
    kernels, streams = [], []
    for d, _, _ in sides:
        with torch.cuda.device(d):
            kernels.append(torch.cuda._compile_kernel(PINGPONG_KERNEL, "kb_pingpong"))
            streams.append(torch.cuda.Stream(d))
    best = None
    for _ in range(repeats):
        flags = [torch.zeros(1, dtype=torch.int32, device=d) for d, _, _ in sides]
        status = [torch.zeros(1, dtype=torch.int32, device=d) for d, _, _ in sides]
        for d, _, _ in sides:
            torch.cuda.synchronize(d)
        t0 = time.perf_counter()
        for i, (d, _, first) in enumerate(sides):
            with torch.cuda.device(d):
                kernels[i](grid=(1, 1, 1), block=(1, 1, 1), stream=streams[i],
                           args=[flags[i], flags[1 - i], iters, first, 1 << 30, status[i]])
        for d, _, _ in sides:
            torch.cuda.synchronize(d)
        elapsed = time.perf_counter() - t0
        if any(int(st.item()) != iters for st in status):
            return None
        one_way = elapsed / (2 * iters)
        best = one_way if best is None else min(best, one_way)
    return best


# ---- the inter-node bandwidth: one task on each of two nodes, through the network ----------------------
INTER_NODE_LINE = "kb-inter-node"
INTER_NODE_BYTES = {"cuda": 256 << 20, "cpu": 8 << 20}


def inter_node_task(host: str, port: int, device: str, nbytes: int, repeats: int = 5) -> None:
    """One task of a two-node step (`srun -N2 --ntasks-per-node=1`): ranks 0 and 1, on different
    nodes, send each other nbytes at once (NCCL on GPUs: the network card; gloo on CPUs: TCP),
    `repeats` times after a warm-up; rank 0 prints the bytes per second per direction (median)."""
    import socket
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    rank = int(os.environ["SLURM_PROCID"])
    store = dist.TCPStore(host, port, 2, False, timeout=timedelta(seconds=120))
    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", store=store, rank=rank, world_size=2)
    dev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
    send = torch.ones(nbytes, dtype=torch.uint8, device=dev)
    recv = torch.empty_like(send)
    times = []
    for i in range(repeats + 1):
        dist.barrier()
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for req in (dist.isend(send, 1 - rank), dist.irecv(recv, 1 - rank)):
            if req is not None:
                req.wait()
        if device == "cuda":
            torch.cuda.synchronize()
        if i:
            times.append(time.perf_counter() - t0)
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    nodes: list = [None, None]
    dist.all_gather_object(nodes, node)
    if rank == 0:
        print(f"{INTER_NODE_LINE} {nbytes / _median(times)} {','.join(nodes)}", flush=True)
    dist.destroy_process_group()


def inter_node(device: str, env: dict[str, str] | None = None, cwd: str | None = None, gpus_per_node: bool = True,
               timeout_s: float = 300.0) -> dict:
    """The inter-node bandwidth per GPU per direction, measured by one two-node step inside the
    allocation: {"inter_node_bw", "inter_node_nodes"}, or {"inter_node_error"}. This process
    serves the step's rendezvous store (the nodes reach it; nothing waits on a shared file)."""
    from torch.distributed import TCPStore

    from ..launch.slurm_workers import drop_job_options, srun_prefix
    from ..rank.steps import reachable_address
    env = dict(os.environ if env is None else env)
    drop_job_options(env)
    env["PYTHONPATH"] = child_pythonpath(env)
    server = TCPStore("0.0.0.0", 0, 2, True, wait_for_workers=False)
    cmd = [*srun_prefix(2, 1, 1 if device == "cuda" and gpus_per_node else 0), sys.executable, "-m",
           "pytest_kernelbench.metrics.calibrate", "--inter-node-task", reachable_address(), str(server.port), device,
           str(INTER_NODE_BYTES[device])]
    try:
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"inter_node_error": f"{e}"}
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == INTER_NODE_LINE:
            return {"inter_node_bw": float(parts[1]), "inter_node_nodes": parts[2].split(",")}
    return {"inter_node_error": f"srun exit {r.returncode}: " + " | ".join(r.stderr.strip().splitlines()[-3:])}


def cache_path(machine: dict) -> Path:
    key = json.dumps([[g.get("name") for g in machine.get("gpus", [])], machine.get("driver"),
                      machine.get("torch"), os.environ.get("CUDA_VISIBLE_DEVICES"), CALIBRATION_VERSION])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pytest-kernelbench" / "calibration"
    return base / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def calibrated(machine: dict, force: bool = False, timeout_s: float = 600) -> dict:
    """Measured ceilings for this machine: from the cache, else measured now in a subprocess."""
    path = cache_path(machine)
    path.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock  # here, not at import: the plugin loads without its runtime packages
    with FileLock(str(path) + ".lock"):
        if path.exists() and not force:
            try:
                return json.loads(path.read_text())
            except ValueError:
                pass
        env = {**os.environ, "PYTHONPATH": child_pythonpath()}
        proc = subprocess.run([sys.executable, "-m", "pytest_kernelbench.metrics.calibrate", "--json", str(path), "--force",
                               "--no-cache"], capture_output=True, text=True, timeout=timeout_s, env=env)
        if proc.returncode != 0 or not path.exists():
            return {"error": (proc.stderr or proc.stdout)[-2000:]}
        return json.loads(path.read_text())


def ceilings(machine: dict, measured: dict) -> dict:
    """What the roofline divides by: the larger of the measured and the published figure. A probe
    only shows what it reached (on 4xH200 our pull kernel read 307 GB/s per GPU while NCCL's
    all_gather moves 343): a ceiling below what real code achieves would flag honest kernels."""
    from ..spec.hardware import published_ceilings
    pub = published_ceilings(machine.get("gpu_model") or "")
    out = {k: pub.get(k) for k in ("link_bw", "hbm_bw", "peak_flops")}
    sources = {}
    for k in out:
        if measured.get(k) and (not out[k] or measured[k] > out[k]):
            out[k] = measured[k]
            sources[k] = "measured"
        elif out[k]:
            sources[k] = pub.get("source", "published")
    # the measured ping-pong where there are two GPUs, else the interconnect's typical figure
    out["latency_s"] = measured.get("latency_s") or pub.get("latency_s")
    sources["latency_s"] = "measured" if measured.get("latency_s") else pub.get("source", "published")
    # inter-node: what a multi-node calibration measured (the NICs), else the published NIC figure
    if pub:
        out["inter_node_bw"] = measured.get("inter_node_bw") or pub.get("inter_node_bw")
        sources["inter_node_bw"] = "measured" if measured.get("inter_node_bw") else pub.get("inter_node_source", "published")
    out["source"] = ", ".join(f"{k} {v}" for k, v in sources.items() if out.get(k)) or "none"
    return out


def table(machine: dict, measured: dict) -> str:
    from ..spec.hardware import published_ceilings
    pub = published_ceilings(machine.get("gpu_model") or measured.get("gpu_model") or "")
    rows = [("ceiling", "measured", "published"),
            ("NVLink per GPU per direction", _gb(measured.get("link_bw")), _gb(pub.get("link_bw"))),
            ("HBM bandwidth", _gb(measured.get("hbm_bw")), _gb(pub.get("hbm_bw"))),
            ("dense bf16", _tf(measured.get("peak_flops")), _tf(pub.get("peak_flops"))),
            ("one-way peer latency (device ping-pong)",
             f"{measured['latency_s'] * 1e6:.2f} us" if measured.get("latency_s") else "-",
             f"{pub['latency_s'] * 1e6:.2f} us" if pub.get("latency_s") else "-")]
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows)


def _gb(x: float | None) -> str:
    return f"{x / 1e9:.0f} GB/s" if x else "-"


def _tf(x: float | None) -> str:
    return f"{x / 1e12:.0f} TFLOP/s" if x else "-"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m pytest_kernelbench.metrics.calibrate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the measurement here")
    ap.add_argument("--force", action="store_true", help="measure even if cached")
    ap.add_argument("--no-cache", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--inter-node-task", nargs=4, metavar=("HOST", "PORT", "DEVICE", "BYTES"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inter_node_task:        # one task of inter_node()'s two-node step
        host, port, device, nbytes = args.inter_node_task
        inter_node_task(host, int(port), device, int(nbytes))
        return
    from ..spec.hardware import machine_info
    machine = machine_info()
    if args.no_cache:       # the subprocess side of calibrated(): just measure
        result = {**measure(), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        Path(args.json).write_text(json.dumps(result, indent=1))
        return
    result = calibrated(machine, force=args.force)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(table(machine, result))


if __name__ == "__main__":
    main()
