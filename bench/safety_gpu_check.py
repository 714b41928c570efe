"""No false alarm from the rank-side multicast guard on real CUDA work: the guard is installed as
a rank installs it, then torch, Triton, load_inline and symmetric memory (1-rank NCCL group) run;
the guard must record nothing. Prints one line per step and the findings."""
from __future__ import annotations

import os
import sys

os.environ.update({"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533", "RANK": "0", "WORLD_SIZE": "1"})
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from pytest_kernelbench.rank.multicast import MulticastGuard  # noqa: E402

guard = MulticastGuard()
guard.install()
steps = []


def step(name, fn):
    try:
        fn()
        steps.append((name, "ok"))
    except Exception as e:  # noqa: BLE001
        steps.append((name, f"{type(e).__name__}: {str(e)[:200]}"))


def matmul():
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()


def triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def add(x, y, out, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)
    x = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    add[(4,)](x, x, out, 4096, BLOCK=1024)
    assert torch.allclose(out, 2 * x)


def inline():
    from torch.utils.cpp_extension import load_inline
    src = "__global__ void twice(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2; }\n" \
          "void run(torch::Tensor x) { twice<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), x.numel()); }\n"
    mod = load_inline("kb_guard_check", cpp_sources="void run(torch::Tensor x);", cuda_sources=src,
                      functions=["run"], verbose=False)
    x = torch.ones(1000, device="cuda")
    mod.run(x)
    assert float(x.sum()) == 2000.0


def symm_mem():
    import torch.distributed._symmetric_memory as symm
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
    buf = symm.empty(4096, device="cuda", dtype=torch.float32)
    h = symm.rendezvous(buf, dist.group.WORLD.group_name)
    buf.fill_(1.0)
    h.barrier()
    torch.cuda.synchronize()


torch.cuda.set_device(0)
for name, fn in (("matmul", matmul), ("triton", triton_kernel), ("load_inline", inline), ("symm_mem", symm_mem)):
    step(name, fn)
for name, res in steps:
    print(f"{name}: {res}")
found = guard.check()
print("guard findings:", found or "none")
sys.exit(1 if found else 0)
