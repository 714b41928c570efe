"""All-reduce (sum) in place at decode sizes: one kernel, one-shot push over torch symmetric memory.

Each block owns the same slice of x on every rank. It stores its slice of x into slot [me] of
every peer's symmetric buffer (NVLink stores), meets the same block of every peer at a flag
barrier (st.release.sys of the call's epoch into the peer's flag slot, ld.acquire.sys spin on its
own, bounded: a lost peer traps instead of hanging), then sums x and the W-1 received slots in
rank order in float32 and writes the slice of x in place. Slots are double-buffered by the
epoch's parity: a rank one call ahead writes the other half, and it cannot get two ahead, since
its next barrier waits for this block of every peer to have finished the call before. x is read
only by its own rank, so overwriting it needs no second barrier. At 16 KiB - 1 MiB one barrier
beats two-shot's two (it moves (W-1) n bytes against 2 (W-1)/W n, which costs little here).

One-time setup per size (the first call): symmetric allocation and rendezvous (collective).
"""
import os

import torch
import torch.distributed as dist

_THREADS = 512
_MAXW = 8
_MAXB = 1024
_FLAG_BYTES = _MAXB * _MAXW * 4
_TIMEOUT_NS = int(float(os.environ.get("KB_SPIN_TIMEOUT_S", "60")) * 1e9)

_CUDA_SRC = r'''
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>

#define MAXW 8
#define MAXB 1024

struct Params {
  void* x;                      // this rank's tensor, reduced in place
  void* slots[MAXW];            // every rank's slot area for this call's parity: [W][n] bf16
  uint32_t* flags[MAXW];        // every rank's flags [MAXB][MAXW]
  long long n;
  long long timeout_ns;
  int rank, world;
  unsigned int epoch;
};

__device__ __forceinline__ void st_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <int V> struct Vec;
template <> struct Vec<8> {
  typedef uint4 T;
  static __device__ __forceinline__ void add(float (&a)[8], const uint4& v) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      a[2 * i] += __uint_as_float(w[i] << 16);
      a[2 * i + 1] += __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  static __device__ __forceinline__ uint4 pack(const float (&a)[8]) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 h = __floats2bfloat162_rn(a[2 * i], a[2 * i + 1]);
      w[i] = *reinterpret_cast<uint32_t*>(&h);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
};
template <> struct Vec<1> {
  typedef unsigned short T;
  static __device__ __forceinline__ void add(float (&a)[1], const unsigned short& v) {
    a[0] += __uint_as_float(((uint32_t)v) << 16);
  }
  static __device__ __forceinline__ unsigned short pack(const float (&a)[1]) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(a[0]));
  }
};

template <int V>
__global__ void __launch_bounds__(512) oneshot(const __grid_constant__ Params p) {
  typedef typename Vec<V>::T T;
  const int W = p.world, me = p.rank;
  const long long packs = p.n / V;
  const long long per = (packs + gridDim.x - 1) / gridDim.x;
  const long long b0 = per * blockIdx.x;
  const long long b1 = b0 + per < packs ? b0 + per : packs;
  T* x = reinterpret_cast<T*>(p.x);
  // push this block's slice of x into slot [me] of every peer
  for (long long i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const T v = x[i];
    for (int k = 1; k < W; ++k) {
      const int q = (me + k) % W;
      reinterpret_cast<T*>(p.slots[q])[(long long)me * packs + i] = v;
    }
  }
  // barrier with the same block of every peer
  __syncthreads();
  const int t = threadIdx.x;
  if (t < W && t != me) {
    st_release(p.flags[t] + blockIdx.x * MAXW + me, p.epoch);
    const uint32_t* mine = p.flags[me] + blockIdx.x * MAXW + t;
    const unsigned long long t0 = now_ns();
    unsigned int spins = 0;
    while ((int)(ld_acquire(mine) - p.epoch) < 0) {
      if ((++spins & 1023u) == 0u && (long long)(now_ns() - t0) > p.timeout_ns) {
        printf("allreduce_decode: rank %d block %d: no signal from rank %d (epoch %u), trapping\n",
               me, (int)blockIdx.x, t, p.epoch);
        __trap();
      }
    }
  }
  __syncthreads();
  // sum in rank order (float32), identical on every rank, into x
  const T* mine_slots = reinterpret_cast<const T*>(p.slots[me]);
  for (long long i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    float a[V];
#pragma unroll
    for (int j = 0; j < V; ++j) a[j] = 0.f;
    T v[MAXW];
#pragma unroll
    for (int q = 0; q < MAXW; ++q)
      if (q < W) v[q] = q == me ? x[i] : mine_slots[(long long)q * packs + i];
#pragma unroll
    for (int q = 0; q < MAXW; ++q)
      if (q < W) Vec<V>::add(a, v[q]);
    x[i] = Vec<V>::pack(a);
  }
}

int launch(int vec, int grid, void* x, const long long* slots, const long long* flags, long long n,
           int rank, int world, long long timeout_ns, unsigned int epoch, void* stream) {
  Params p;
  p.x = x;
  for (int r = 0; r < MAXW; ++r) {
    p.slots[r] = r < world ? reinterpret_cast<void*>(slots[r]) : nullptr;
    p.flags[r] = r < world ? reinterpret_cast<uint32_t*>(flags[r]) : nullptr;
  }
  p.n = n;
  p.timeout_ns = timeout_ns;
  p.rank = rank;
  p.world = world;
  p.epoch = epoch;
  cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
  if (vec == 8) oneshot<8><<<grid, 512, 0, st>>>(p);
  else oneshot<1><<<grid, 512, 0, st>>>(p);
  return (int)cudaGetLastError();
}

const char* err_str(int e) { return cudaGetErrorString((cudaError_t)e); }
'''

_CPP_SRC = r'''
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <vector>

int launch(int vec, int grid, void* x, const long long* slots, const long long* flags, long long n,
           int rank, int world, long long timeout_ns, unsigned int epoch, void* stream);
const char* err_str(int e);

struct State {
  long long slots[8], flags[8], half_bytes, n, timeout_ns;
  int rank, world, grid;
  unsigned int epoch;
};
static std::vector<State> g_states;

int64_t create_state(std::vector<int64_t> slots, std::vector<int64_t> flags, int64_t half_bytes, int64_t n,
                     int64_t rank, int64_t world, int64_t grid, int64_t timeout_ns) {
  TORCH_CHECK(world >= 1 && world <= 8 && grid >= 1 && grid <= 1024);
  State s;
  for (int r = 0; r < 8; ++r) {
    s.slots[r] = r < world ? slots[r] : 0;
    s.flags[r] = r < world ? flags[r] : 0;
  }
  s.half_bytes = half_bytes;
  s.n = n;
  s.timeout_ns = timeout_ns;
  s.rank = (int)rank;
  s.world = (int)world;
  s.grid = (int)grid;
  s.epoch = 0;
  g_states.push_back(s);
  return (int64_t)g_states.size() - 1;
}

torch::Tensor run(torch::Tensor x, int64_t sid) {
  TORCH_CHECK(sid >= 0 && sid < (int64_t)g_states.size(), "bad state id");
  State& s = g_states[sid];
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kBFloat16 && x.is_contiguous() && x.numel() == s.n);
  const c10::cuda::CUDAGuard guard(x.device());
  s.epoch += 1;
  long long slots[8];
  for (int r = 0; r < 8; ++r) slots[r] = s.slots[r] ? s.slots[r] + (long long)(s.epoch & 1u) * s.half_bytes : 0;
  const int vec = ((reinterpret_cast<uintptr_t>(x.data_ptr()) & 15) == 0 && s.n % 8 == 0) ? 8 : 1;
  int e = launch(vec, s.grid, x.data_ptr(), slots, s.flags, s.n, s.rank, s.world, s.timeout_ns, s.epoch,
                 (void*)c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(e == 0, "kernel launch failed: ", err_str(e));
  return x;
}
'''

_ext = None
_states = {}    # n -> state id
_keep = []      # symmetric buffers and handles, alive for the process lifetime


def _build():
    global _ext
    from torch.utils.cpp_extension import load_inline
    _ext = load_inline(name="kb_allreduce_decode_oneshot", cpp_sources=[_CPP_SRC], cuda_sources=[_CUDA_SRC],
                       functions=["create_state", "run"], extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
                       extra_cflags=["-O3"], verbose=False)


if torch.cuda.is_available():
    _build()


def _make_state(x):
    import torch.distributed._symmetric_memory as symm_mem

    if _ext is None:
        raise RuntimeError("this solution needs CUDA")
    n, world, rank = x.numel(), dist.get_world_size(), dist.get_rank()
    if world > _MAXW:
        raise RuntimeError("at most 8 ranks")
    half_bytes = (world * n * 2 + 4095) // 4096 * 4096     # [W][n] bf16 slots, one parity
    buf = symm_mem.empty(_FLAG_BYTES + 2 * half_bytes, dtype=torch.uint8, device=x.device)
    buf[:_FLAG_BYTES].zero_()
    torch.cuda.synchronize(x.device)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
    ptrs = [int(p) for p in hdl.buffer_ptrs]
    off = buf.data_ptr() - ptrs[rank]          # the tensor may sit inside a larger pool block
    flags = [p + off for p in ptrs]
    slots = [p + off + _FLAG_BYTES for p in ptrs]
    grid = max(1, min(_MAXB, -(-n // (8 * _THREADS))))
    sid = _ext.create_state(slots, flags, half_bytes, n, rank, world, grid, _TIMEOUT_NS)
    torch.cuda.synchronize(x.device)
    dist.barrier()             # every rank's flags are zero before anyone's first signal (setup call)
    _keep.append((buf, hdl))
    _states[n] = sid
    return sid


def solution(x: torch.Tensor) -> torch.Tensor:
    sid = _states.get(x.numel())
    if sid is None:
        sid = _make_state(x)
    return _ext.run(x, sid)
