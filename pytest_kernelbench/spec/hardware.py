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

# The inter-node bandwidth per GPU per direction when the cluster's was not measured: the NIC
# each GPU has in the vendors' reference systems (DGX H100/H200/B200: one ConnectX-7 at 400 Gb/s
# per GPU = 50 GB/s; DGX A100: one ConnectX-6 at 200 Gb/s per GPU = 25 GB/s). A cluster with fewer
# or slower NICs per GPU is slower than this, which only lowers the roofline fractions.
INTER_NODE_PUBLISHED = {"H200": 50e9, "H100": 50e9, "B200": 50e9, "A100": 25e9}
INTER_NODE_DEFAULT = 50e9       # any other GPU: one 400 Gb/s NIC per GPU
INTER_NODE_SOURCE = "published NIC: {gbit} Gb/s per GPU"


def inter_node_ceiling(gpu_name: str) -> tuple[float, str]:
    """The published inter-node bandwidth per GPU per direction, and where it comes from."""
    bw = next((v for k, v in INTER_NODE_PUBLISHED.items() if k in (gpu_name or "").upper()), INTER_NODE_DEFAULT)
    return bw, INTER_NODE_SOURCE.format(gbit=round(bw * 8 / 1e9))


# Published per-model facts a kernel writer plans with (vendor datasheets and CUDA programming
# guide, SXM parts): compute capability, SMs, L2, shared memory, registers, and dense tensor-core
# throughput by dtype in FLOP/s (int8 in OP/s). The driver's own figures (device_facts()) win
# wherever a GPU is there to ask; these stand in for recorded machine facts that lack them.
DEVICE_FACTS = {
    "H200": {"compute_capability": "9.0", "sm_count": 132, "l2_bytes": 50 << 20, "smem_per_sm": 228 << 10,
             "smem_per_block": 227 << 10, "regs_per_sm": 65536, "regs_per_block": 65536,
             "tensor_flops": {"fp64": 67e12, "tf32": 495e12, "bf16": 989e12, "fp16": 989e12, "fp8": 1979e12,
                              "int8": 1979e12}},
    "H100": {"compute_capability": "9.0", "sm_count": 132, "l2_bytes": 50 << 20, "smem_per_sm": 228 << 10,
             "smem_per_block": 227 << 10, "regs_per_sm": 65536, "regs_per_block": 65536,
             "tensor_flops": {"fp64": 67e12, "tf32": 495e12, "bf16": 989e12, "fp16": 989e12, "fp8": 1979e12,
                              "int8": 1979e12}},
    "B200": {"compute_capability": "10.0", "sm_count": 148, "smem_per_sm": 228 << 10, "smem_per_block": 227 << 10,
             "regs_per_sm": 65536, "regs_per_block": 65536,
             "tensor_flops": {"fp64": 37e12, "tf32": 1125e12, "bf16": 2250e12, "fp16": 2250e12, "fp8": 4500e12,
                              "fp4": 9000e12}},
    "A100": {"compute_capability": "8.0", "sm_count": 108, "l2_bytes": 40 << 20, "smem_per_sm": 164 << 10,
             "smem_per_block": 163 << 10, "regs_per_sm": 65536, "regs_per_block": 65536,
             "tensor_flops": {"fp64": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12, "int8": 624e12}},
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
            bw, where = inter_node_ceiling(key)
            return {**figures, "inter_node_bw": bw, "source": f"published {key}", "inter_node_source": where}
    return {}


def published_device_facts(gpu_name: str) -> dict:
    for key, facts in DEVICE_FACTS.items():
        if key in (gpu_name or "").upper():
            return {**facts, "source": f"published {key}"}
    return {}


# What the driver says about GPU 0 (cuda.h CUdevice_attribute numbers). cuInit creates no context;
# it runs in a subprocess anyway, so this process never loads the driver.
DEVICE_ATTRIBUTES = {"cc_major": 75, "cc_minor": 76, "sm_count": 16, "l2_bytes": 38, "smem_per_sm": 81,
                     "smem_per_block": 97, "regs_per_sm": 82, "regs_per_block": 12, "clock_khz": 13}
_DEVICE_PROBE = """
import ctypes, json, sys
cu = ctypes.CDLL("libcuda.so.1")
if cu.cuInit(0) != 0:
    sys.exit(1)
out = {}
for name, attr in json.loads(sys.argv[1]).items():
    v = ctypes.c_int(0)
    if cu.cuDeviceGetAttribute(ctypes.byref(v), attr, 0) == 0:
        out[name] = v.value
print(json.dumps(out))
"""


def device_facts() -> dict:
    """GPU 0's compute capability, SMs, L2, shared memory and registers from the driver ({} without
    a GPU or a driver)."""
    import sys
    try:
        out = subprocess.run([sys.executable, "-c", _DEVICE_PROBE, json.dumps(DEVICE_ATTRIBUTES)],
                             capture_output=True, text=True, timeout=60)
        raw = json.loads(out.stdout) if out.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    facts = {k: v for k, v in raw.items() if k not in ("cc_major", "cc_minor")}
    if "cc_major" in raw and "cc_minor" in raw:
        facts["compute_capability"] = f"{raw['cc_major']}.{raw['cc_minor']}"
    return {**facts, "source": "driver"} if facts else {}


def toolchain() -> dict:
    """The compilers a candidate builds with: nvcc (as torch's cpp_extension finds it) and Triton."""
    out: dict = {"nvcc": None, "triton": None}
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = os.path.join(home, "bin", "nvcc") if home and os.path.exists(os.path.join(home, "bin", "nvcc")) else "nvcc"
    for line in _run([nvcc, "--version"]).splitlines():
        if "release" in line:       # "Cuda compilation tools, release 13.0, V13.0.88"
            out["nvcc"] = line.rsplit(",", 1)[-1].strip().lstrip("V")
    try:
        from importlib.metadata import PackageNotFoundError, version
        try:
            out["triton"] = version("triton")
        except PackageNotFoundError:
            pass
    except ImportError:
        pass
    return out


def versions() -> dict:
    v: dict[str, str | None] = {"python": platform.python_version()}
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
        info["device"] = device_facts()      # the prompt fills what is missing from DEVICE_FACTS
        info.update(toolchain())
    else:
        info["ceilings"] = {}
    # plain JSON types only: the controller ships this to xdist workers
    return json.loads(json.dumps(info, default=str))


def describe(info: dict) -> str:
    """One line for the pytest header."""
    src = info.get("facts_from")      # a Slurm run: the facts of a compute node (launch/slurm_workers.py)
    where = "" if not src else f" [facts from node {src['node']}]" if src.get("node") else \
        f" [facts from this controller: the node probe failed: {src.get('error')}]"
    if info.get("gpu_count"):
        c = info.get("ceilings") or {}
        roof = f", ceilings {c.get('source', 'none')}" if c else ""
        return (f"{info['gpu_count']}x {info['gpu_model']} (driver {info.get('driver')}), torch {info.get('torch')}, "
                f"CUDA {info.get('cuda')}, NCCL {info.get('nccl')}{roof}{where}")
    return (f"CPU only: {info.get('cpu')} x{info.get('cpu_count')}, torch {info.get('torch')} "
            f"(gloo; times are not GPU speed){where}")


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
