"""The environment every launcher gives a job's ranks: NVLink multicast off, hangs that surface
fast, the job's token (how the process hunter knows the job's processes) and its GPUs."""
from __future__ import annotations

import os

from ..protocol import MULTICAST_OFF, SHARED_ENV, child_pythonpath

SAFE_ENV = {  # NVLink multicast must stay off on the lent machines (safety.py); hangs must surface fast
    **MULTICAST_OFF,
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "0", "TORCH_FR_BUFFER_SIZE": "0",   # the flight recorder off (its current name)
    "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "500", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    "TORCH_NCCL_ENABLE_MONITORING": "0", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
}


def job_env(token: str, cuda_devices: list[int] | None, extensions_dir: str | None,
            allow_multicast: bool = False, shared: bool = False) -> dict[str, str]:
    # the allocation's and this step's SLURM_* would make a rank look like a task of this step
    # (launch/slurm.py gives a step's srun back what names the allocation)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "PYTEST_CURRENT_TEST",
              "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS"):
        env.pop(k, None)
    env.update({k: v for k, v in SAFE_ENV.items() if not (allow_multicast and k in MULTICAST_OFF)})
    if shared:      # ranks share a GPU (--kb-oversubscribe): every process of the job, the multicast switches untouched
        env.update(SHARED_ENV)
    env["KB_JOB_TOKEN"] = token
    env["KB_NODES"] = "1"       # the fork and torchrun launchers run a job on one node (slurm: rank/steps.py)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = child_pythonpath(env)
    if cuda_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in cuda_devices)
    if extensions_dir:
        env["TORCH_EXTENSIONS_DIR"] = extensions_dir
        env["TRITON_CACHE_DIR"] = os.path.join(extensions_dir, "triton")
    return env
