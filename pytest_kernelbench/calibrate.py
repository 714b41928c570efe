"""Measure the machine's ceilings on the GPUs it is given: per-GPU NVLink bandwidth per direction
(an SM-driven kernel pulling from every peer at once), HBM bandwidth (device copy), dense bf16
matrix rate, and small-message latency (a 4-byte peer copy).

    python -m pytest_kernelbench.calibrate [--json PATH] [--force]

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
from typing import TYPE_CHECKING

from filelock import FileLock
from .protocol import child_pythonpath

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
    # small-message latency: a 4-byte peer copy, averaged
    a, b = torch.zeros(1, device=devs[0]), torch.zeros(1, device=devs[1])
    b.copy_(a)
    torch.cuda.synchronize(devs[0])
    k = 1000
    t0 = time.perf_counter()
    for _ in range(k):
        b.copy_(a)
    torch.cuda.synchronize(devs[0])
    torch.cuda.synchronize(devs[1])
    return {"link_bw": link_bw, "latency_s": (time.perf_counter() - t0) / k}


def cache_path(machine: dict) -> Path:
    key = json.dumps([[g.get("name") for g in machine.get("gpus", [])], machine.get("driver"),
                      machine.get("torch"), os.environ.get("CUDA_VISIBLE_DEVICES")])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pytest-kernelbench" / "calibration"
    return base / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def calibrated(machine: dict, force: bool = False, timeout_s: float = 600) -> dict:
    """Measured ceilings for this machine: from the cache, else measured now in a subprocess."""
    path = cache_path(machine)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.exists() and not force:
            try:
                return json.loads(path.read_text())
            except ValueError:
                pass
        env = {**os.environ, "PYTHONPATH": child_pythonpath()}
        proc = subprocess.run([sys.executable, "-m", "pytest_kernelbench.calibrate", "--json", str(path), "--force",
                               "--no-cache"], capture_output=True, text=True, timeout=timeout_s, env=env)
        if proc.returncode != 0 or not path.exists():
            return {"error": (proc.stderr or proc.stdout)[-2000:]}
        return json.loads(path.read_text())


def ceilings(machine: dict, measured: dict) -> dict:
    """What the roofline divides by: the larger of the measured and the published figure. A probe
    only shows what it reached (on 4xH200 our pull kernel read 307 GB/s per GPU while NCCL's
    all_gather moves 343): a ceiling below what real code achieves would flag honest kernels."""
    from .hardware import published_ceilings
    pub = published_ceilings(machine.get("gpu_model") or "")
    out = {k: pub.get(k) for k in ("link_bw", "hbm_bw", "peak_flops")}
    sources = {}
    for k in out:
        if measured.get(k) and (not out[k] or measured[k] > out[k]):
            out[k] = measured[k]
            sources[k] = "measured"
        elif out[k]:
            sources[k] = pub.get("source", "published")
    out["source"] = ", ".join(f"{k} {v}" for k, v in sources.items()) or "none"
    out["latency_s"] = measured.get("latency_s")
    return out


def table(machine: dict, measured: dict) -> str:
    from .hardware import published_ceilings
    pub = published_ceilings(machine.get("gpu_model") or measured.get("gpu_model") or "")
    rows = [("ceiling", "measured", "published"),
            ("NVLink per GPU per direction", _gb(measured.get("link_bw")), _gb(pub.get("link_bw"))),
            ("HBM bandwidth", _gb(measured.get("hbm_bw")), _gb(pub.get("hbm_bw"))),
            ("dense bf16", _tf(measured.get("peak_flops")), _tf(pub.get("peak_flops"))),
            ("small-message latency", f"{measured['latency_s'] * 1e6:.1f} us" if measured.get("latency_s") else "-", "-")]
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(r)) for r in rows)


def _gb(x: float | None) -> str:
    return f"{x / 1e9:.0f} GB/s" if x else "-"


def _tf(x: float | None) -> str:
    return f"{x / 1e12:.0f} TFLOP/s" if x else "-"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m pytest_kernelbench.calibrate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the measurement here")
    ap.add_argument("--force", action="store_true", help="measure even if cached")
    ap.add_argument("--no-cache", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    from .hardware import machine_info
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
