"""Building blocks of a multi-GPU candidate (PyTorch >= 2.11, CUDA GPUs such as H100/H200): a
symmetric memory buffer and its rendezvous, peer pointers, a load_inline CUDA kernel that reads
a peer's buffer over NVLink, and a flag barrier that stays correct when calls run back to back.
What it computes is no problem's task: rank r returns x + (the x of rank (r + 1) % W), bf16."""
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

THREADS = 256
MAX_BLOCKS = 1024                    # flag slots per rank: [block][peer]
FLAG_BYTES = MAX_BLOCKS * 8 * 4      # up to W = 8 peers, one uint32 each

CUDA_SRC = r"""
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

struct Peers { const __nv_bfloat16* data[8]; unsigned int* flags[8]; };

// Block b meets block b of every rank: thread t < world stores `epoch` into slot [b][rank] of
// rank t's flags, then waits until slot [b][t] of its own flags has reached `epoch`. Epochs grow
// by one per call, so flags are never reset and a fast peer's next call is never mistaken for
// this one. The wait is bounded: a lost peer becomes a CUDA error, not a hang.
__device__ void block_barrier(const Peers& p, int rank, int world, unsigned int epoch) {
  int t = threadIdx.x;
  if (t < world) {
    unsigned int* remote = p.flags[t] + blockIdx.x * 8 + rank;
    unsigned int* mine = p.flags[rank] + blockIdx.x * 8 + t;
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(remote), "r"(epoch) : "memory");
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    unsigned int seen;
    do {
      asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(mine) : "memory");
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      if (now - start > 10000000000ull) __trap();   // 10 s
    } while ((int)(seen - epoch) < 0);
  }
  __syncthreads();
}

// Each block stages its share of x in this rank's buffer, meets the same block of every peer
// (whose share is the same elements), then reads the right neighbour's staged copy.
__global__ void add_neighbour(Peers p, const __nv_bfloat16* x, __nv_bfloat16* out, int64_t n,
                              int rank, int world, unsigned int epoch) {
  __nv_bfloat16* staged = const_cast<__nv_bfloat16*>(p.data[rank]);
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) staged[i] = x[i];
  __syncthreads();
  block_barrier(p, rank, world, epoch);
  const __nv_bfloat16* next = p.data[(rank + 1) % world];
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(next[i]));
}

int launch_add_neighbour(const void* x, void* out, int64_t n, const int64_t* data, const int64_t* flags,
                         int rank, int world, unsigned int epoch, int blocks, int threads, void* stream) {
  Peers p;
  for (int q = 0; q < 8; ++q) {
    p.data[q] = q < world ? reinterpret_cast<const __nv_bfloat16*>(data[q]) : nullptr;
    p.flags[q] = q < world ? reinterpret_cast<unsigned int*>(flags[q]) : nullptr;
  }
  add_neighbour<<<blocks, threads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(
      p, reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<__nv_bfloat16*>(out), n, rank, world, epoch);
  return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
int launch_add_neighbour(const void* x, void* out, int64_t n, const int64_t* data, const int64_t* flags,
                         int rank, int world, unsigned int epoch, int blocks, int threads, void* stream);

torch::Tensor add_neighbour(torch::Tensor x, std::vector<int64_t> data, std::vector<int64_t> flags,
                            int64_t rank, int64_t epoch, int64_t blocks, int64_t threads, int64_t stream) {
  auto out = torch::empty_like(x);
  int err = launch_add_neighbour(x.data_ptr(), out.data_ptr(), x.numel(), data.data(), flags.data(), (int)rank,
                                 (int)data.size(), (unsigned int)epoch, (int)blocks, (int)threads,
                                 reinterpret_cast<void*>(stream));
  TORCH_CHECK(err == 0, "add_neighbour launch failed: CUDA error ", err);
  return out;
}
"""

_ext = None
_sizes: dict = {}   # numel -> per-size state, made by the first call of that size (untimed)


def _setup(x: torch.Tensor) -> dict:
    global _ext
    if _ext is None:
        _ext = load_inline("kb_primitives_example", cpp_sources=[CPP_SRC], cuda_sources=[CUDA_SRC],
                           functions=["add_neighbour"], extra_cuda_cflags=["-O3"], verbose=False)
    rank, world, n = dist.get_rank(), dist.get_world_size(), x.numel()
    if world > 8:
        raise ValueError("this example has flag slots and peer pointers for up to 8 ranks")
    half = (n * x.element_size() + 255) // 256 * 256           # two halves: calls alternate by parity
    buf = symm_mem.empty(FLAG_BYTES + 2 * half, dtype=torch.uint8, device=x.device)
    buf[:FLAG_BYTES].zero_()
    torch.cuda.synchronize()        # flags are zero before any peer can reach them
    handle = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)   # collective: every rank calls it
    # buffer_ptrs[q] is where rank q's allocation starts in this process; buf may sit inside it
    offset = buf.data_ptr() - int(handle.buffer_ptrs[rank])
    base = [int(p) + offset for p in handle.buffer_ptrs]
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    # at most one block per SM, so every block is resident and no barrier waits for a block
    # that cannot be scheduled (the grid is the same on every rank)
    blocks = max(1, min(sms, MAX_BLOCKS, -(-n // THREADS)))
    return {"keep": (buf, handle), "flags": base, "epoch": 0, "blocks": blocks,
            "data": [[b + FLAG_BYTES + parity * half for b in base] for parity in (0, 1)]}


def solution(x: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.bfloat16:
        raise TypeError(f"this example is written for bfloat16, got {x.dtype}")
    x = x.contiguous()
    s = _sizes.get(x.numel())
    if s is None:
        s = _sizes[x.numel()] = _setup(x)
    # Call k writes half k % 2. A peer overwrites a half two calls later, after the barrier of
    # call k + 1, which this rank reaches only once its call-k kernel (which read that half) has
    # finished on its stream: no end-of-call barrier is needed, and nothing is synchronized.
    s["epoch"] += 1
    return _ext.add_neighbour(x, s["data"][s["epoch"] % 2], s["flags"], dist.get_rank(), s["epoch"], s["blocks"],
                              THREADS, torch.cuda.current_stream().cuda_stream)
