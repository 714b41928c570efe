"""What machine this is: CPU/GPU model and count, topology, versions, and the ceilings the
roofline divides by. Runs in the pytest process and must not create a CUDA context there
(xdist workers would each hold one on GPU 0), so GPU facts come from nvidia-smi.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess

# Published per-GPU figures (vendor datasheets; SXM parts): NVLink bandwidth per direction,
# HBM bandwidth, dense bf16 matrix rate. The fallback when nothing was measured.
# latency_s: one-way GPU-to-GPU flag latency over NVLink, the roofline's fallback where no
# ping-pong can be measured (one GPU visible); vendors publish none, so this is set low on purpose
# (a floor too low only lowers fractions; one too high would flag honest kernels as suspect)
PUBLISHED = {
    "H200": {"link_bw": 450e9, "hbm_bw": 4.8e12, "peak_flops": 989e12, "latency_s": 0.8e-6},
    "H100": {"link_bw": 450e9, "hbm_bw": 3.35e12, "peak_flops": 989e12, "latency_s": 0.8e-6},
    "B200": {"link_bw": 900e9, "hbm_bw": 8.0e12, "peak_flops": 2250e12, "latency_s": 0.8e-6},
    "A100": {"link_bw": 300e9, "hbm_bw": 2.039e12, "peak_flops": 312e12, "latency_s": 1.0e-6},
}


def _run(cmd: list[str], timeout: float = 20.0) -> str:
    if not shutil.which(cmd[0]):
        return ""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[dict]:
    out = _run(["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader,nounits"])
    found = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            found.append({"index": int(parts[0]), "name": parts[1], "memory_mib": float(parts[2]), "driver": parts[3]})
    return found


def cuda_device_count() -> int:
    """GPUs usable by torch (respects CUDA_VISIBLE_DEVICES) without creating a context."""
    try:
        import torch
    except ImportError:
        return 0
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as e:  # a broken CUDA install must not quietly turn a GPU run into a CPU run
        raise RuntimeError(f"torch cannot count the CUDA GPUs ({type(e).__name__}: {e}); fix the CUDA "
                           "install or run on CPU with --kb-device=cpu") from e


def published_ceilings(gpu_name: str) -> dict:
    for key, figures in PUBLISHED.items():
        if key in gpu_name.upper():
            return {**figures, "source": f"published {key}"}
    return {}


def versions() -> dict:
    v = {"python": platform.python_version()}
    try:
        import torch
        v["torch"] = torch.__version__
        v["cuda"] = torch.version.cuda
        try:
            nccl = torch.cuda.nccl.version() if torch.cuda.is_available() else None
            v["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl
        except Exception:
            v["nccl"] = None
    except ImportError:
        v["torch"] = None
    return v


def machine_info() -> dict:
    info = {"hostname": platform.node(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
            "platform": platform.platform(), **versions()}
    g = gpus()
    info["gpus"] = g
    info["gpu_count"] = len(g)
    info["gpu_model"] = g[0]["name"] if g else None
    info["driver"] = g[0]["driver"] if g else None
    if g:
        info["topology"] = _run(["nvidia-smi", "topo", "-m"]).strip()
        info["multicast"] = {k: os.environ.get(k) for k in
                             ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")}
        info["ceilings"] = published_ceilings(g[0]["name"])
    else:
        info["ceilings"] = {}
    # plain JSON types only: the controller ships this to xdist workers
    return json.loads(json.dumps(info, default=str))


def describe(info: dict) -> str:
    """One line for the pytest header."""
    if info.get("gpu_count"):
        c = info.get("ceilings") or {}
        roof = f", ceilings {c.get('source', 'none')}" if c else ""
        return (f"{info['gpu_count']}x {info['gpu_model']} (driver {info.get('driver')}), torch {info.get('torch')}, "
                f"CUDA {info.get('cuda')}, NCCL {info.get('nccl')}{roof}")
    return f"CPU only: {info.get('cpu')} x{info.get('cpu_count')}, torch {info.get('torch')} (gloo; times are not GPU speed)"


# CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED (cuda.h, CUDA >= 12.1). Reading an attribute uses no
# multicast; it runs in a subprocess so this process never initializes the driver.
_MULTICAST_PROBE = """
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
v = ctypes.c_int(0)
if cu.cuInit(0) != 0 or cu.cuDeviceGetAttribute(ctypes.byref(v), 132, 0) != 0:
    sys.exit(1)
print(v.value)
"""


def multicast_supported() -> bool:
    """Whether GPU 0 reports NVLink multicast support (False without GPUs or a driver)."""
    if not gpus():
        return False
    import sys
    try:
        out = subprocess.run([sys.executable, "-c", _MULTICAST_PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout.strip() == "1"
