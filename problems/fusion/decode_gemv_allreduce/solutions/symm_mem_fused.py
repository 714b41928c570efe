"""Decode GEMV + all-reduce + residual + RMSNorm: cuBLAS for the GEMV, then ONE kernel for the rest.

The partial [T, H] comes from F.linear (the weight shard streams from memory: cuBLAS does that
well). The kernel has one block per token row: it stores its row of the partial into slot [me]
of every peer's symmetric buffer (NVLink stores), meets the same block of every peer at a flag
barrier (st.release.sys of the call's epoch, bounded ld.acquire.sys spin that traps on a lost
peer), then sums the W partials in rank order in float32, adds the residual, rounds to
bfloat16 (new_residual, as the task defines it), takes the row's mean square of those values
and writes the normed row. Slots are double-buffered by the epoch's parity (a rank one call
ahead writes the other half; its next barrier keeps it from getting two ahead). NCCL's all-reduce
and the five elementwise kernels of the reference become one launch and one barrier.
(The flag barrier is the one of collective/allreduce_decode's shipped solution.)

One-time setup per size (the first call): symmetric allocation and rendezvous (collective).
"""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

_THREADS = 512
_MAXW = 8
_MAXB = 64
_FLAG_BYTES = _MAXB * _MAXW * 4
_TIMEOUT_NS = int(float(os.environ.get("KB_SPIN_TIMEOUT_S", "60")) * 1e9)

_CUDA_SRC = r'''
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>

#define MAXW 8
#define MAXB 64

struct Params {
  const void* partial;          // this rank's [T, H] partial
  const void* residual;         // [T, H]
  const void* gain;             // [H]
  void* normed;                 // [T, H] out
  void* new_residual;           // [T, H] out
  void* slots[MAXW];            // every rank's slot area for this call's parity: [W][T*H] bf16
  uint32_t* flags[MAXW];        // every rank's flags [MAXB][MAXW]
  long long n;                  // T * H
  int hidden;
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
  static __device__ __forceinline__ void get(float (&a)[8], const uint4& v) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      a[2 * i] = __uint_as_float(w[i] << 16);
      a[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
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
  static __device__ __forceinline__ void get(float (&a)[1], const unsigned short& v) {
    a[0] = __uint_as_float(((uint32_t)v) << 16);
  }
  static __device__ __forceinline__ unsigned short pack(const float (&a)[1]) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(a[0]));
  }
};

template <int V>
__global__ void __launch_bounds__(512) fused(const __grid_constant__ Params p) {
  typedef typename Vec<V>::T T;
  const int W = p.world, me = p.rank;
  const long long packs = p.n / V, row_packs = p.hidden / V;
  const long long b0 = row_packs * blockIdx.x, b1 = b0 + row_packs;     // this block's token row
  const T* part = reinterpret_cast<const T*>(p.partial);
  for (long long i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    const T v = part[i];
    for (int k = 1; k < W; ++k) {
      const int q = (me + k) % W;
      reinterpret_cast<T*>(p.slots[q])[(long long)me * packs + i] = v;
    }
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < W && t != me) {
    st_release(p.flags[t] + blockIdx.x * MAXW + me, p.epoch);
    const uint32_t* mine = p.flags[me] + blockIdx.x * MAXW + t;
    const unsigned long long t0 = now_ns();
    unsigned int spins = 0;
    while ((int)(ld_acquire(mine) - p.epoch) < 0) {
      if ((++spins & 1023u) == 0u && (long long)(now_ns() - t0) > p.timeout_ns) {
        printf("decode_gemv_allreduce: rank %d block %d: no signal from rank %d (epoch %u), trapping\n",
               me, (int)blockIdx.x, t, p.epoch);
        __trap();
      }
    }
  }
  __syncthreads();
  const T* slots = reinterpret_cast<const T*>(p.slots[me]);
  const T* res = reinterpret_cast<const T*>(p.residual);
  T* newres = reinterpret_cast<T*>(p.new_residual);
  float ss = 0.f;
  for (long long i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    float a[V], b[V];
    Vec<V>::get(a, res[i]);
    for (int q = 0; q < W; ++q) {          // rank order: the same sum on every rank
      Vec<V>::get(b, q == me ? part[i] : slots[(long long)q * packs + i]);
#pragma unroll
      for (int j = 0; j < V; ++j) a[j] += b[j];
    }
    const T r = Vec<V>::pack(a);
    newres[i] = r;
    Vec<V>::get(a, r);                     // the bfloat16 values the norm is taken of
#pragma unroll
    for (int j = 0; j < V; ++j) ss += a[j] * a[j];
  }
  __shared__ float red[32];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((t & 31) == 0) red[t >> 5] = ss;
  __syncthreads();
  if (t < 32) {
    float v = t < (int)(blockDim.x >> 5) ? red[t] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (t == 0) red[0] = v;
  }
  __syncthreads();
  const float rstd = rsqrtf(red[0] / (float)p.hidden + 1e-6f);
  const T* gain = reinterpret_cast<const T*>(p.gain);
  T* normed = reinterpret_cast<T*>(p.normed);
  for (long long i = b0 + threadIdx.x; i < b1; i += blockDim.x) {
    float a[V], g[V];
    Vec<V>::get(a, newres[i]);            // this thread's own store above
    Vec<V>::get(g, gain[i - b0]);
#pragma unroll
    for (int j = 0; j < V; ++j) a[j] = a[j] * rstd * g[j];
    normed[i] = Vec<V>::pack(a);
  }
}

int launch(int vec, int rows, int hidden, const void* partial, const void* residual, const void* gain,
           void* normed, void* new_residual, const long long* slots, const long long* flags,
           int rank, int world, long long timeout_ns, unsigned int epoch, void* stream) {
  Params p;
  p.partial = partial;
  p.residual = residual;
  p.gain = gain;
  p.normed = normed;
  p.new_residual = new_residual;
  for (int r = 0; r < MAXW; ++r) {
    p.slots[r] = r < world ? reinterpret_cast<void*>(slots[r]) : nullptr;
    p.flags[r] = r < world ? reinterpret_cast<uint32_t*>(flags[r]) : nullptr;
  }
  p.n = (long long)rows * hidden;
  p.hidden = hidden;
  p.timeout_ns = timeout_ns;
  p.rank = rank;
  p.world = world;
  p.epoch = epoch;
  cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
  if (vec == 8) fused<8><<<rows, 512, 0, st>>>(p);
  else fused<1><<<rows, 512, 0, st>>>(p);
  return (int)cudaGetLastError();
}

const char* err_str(int e) { return cudaGetErrorString((cudaError_t)e); }
'''

_CPP_SRC = r'''
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <vector>

int launch(int vec, int rows, int hidden, const void* partial, const void* residual, const void* gain,
           void* normed, void* new_residual, const long long* slots, const long long* flags,
           int rank, int world, long long timeout_ns, unsigned int epoch, void* stream);
const char* err_str(int e);

struct State {
  long long slots[8], flags[8], half_bytes, timeout_ns;
  int rank, world;
  unsigned int epoch;
};
static std::vector<State> g_states;

int64_t create_state(std::vector<int64_t> slots, std::vector<int64_t> flags, int64_t half_bytes,
                     int64_t rank, int64_t world, int64_t timeout_ns) {
  TORCH_CHECK(world >= 1 && world <= 8);
  State s;
  for (int r = 0; r < 8; ++r) {
    s.slots[r] = r < world ? slots[r] : 0;
    s.flags[r] = r < world ? flags[r] : 0;
  }
  s.half_bytes = half_bytes;
  s.timeout_ns = timeout_ns;
  s.rank = (int)rank;
  s.world = (int)world;
  s.epoch = 0;
  g_states.push_back(s);
  return (int64_t)g_states.size() - 1;
}

static bool aligned(const torch::Tensor& t) { return (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15) == 0; }

std::vector<torch::Tensor> run(torch::Tensor partial, torch::Tensor residual, torch::Tensor gain, int64_t sid) {
  TORCH_CHECK(sid >= 0 && sid < (int64_t)g_states.size(), "bad state id");
  State& s = g_states[sid];
  TORCH_CHECK(partial.is_contiguous() && residual.is_contiguous() && gain.is_contiguous());
  TORCH_CHECK(partial.size(0) <= 64, "at most 64 rows");
  const c10::cuda::CUDAGuard guard(partial.device());
  const int rows = (int)partial.size(0), hidden = (int)partial.size(1);
  torch::Tensor normed = at::empty_like(residual), new_residual = at::empty_like(residual);
  s.epoch += 1;
  long long slots[8];
  for (int r = 0; r < 8; ++r) slots[r] = s.slots[r] ? s.slots[r] + (long long)(s.epoch & 1u) * s.half_bytes : 0;
  const int vec = (hidden % 8 == 0 && aligned(partial) && aligned(residual) && aligned(gain) && aligned(normed)
                   && aligned(new_residual)) ? 8 : 1;
  int e = launch(vec, rows, hidden, partial.data_ptr(), residual.data_ptr(), gain.data_ptr(), normed.data_ptr(),
                 new_residual.data_ptr(), slots, s.flags, s.rank, s.world, s.timeout_ns, s.epoch,
                 (void*)c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(e == 0, "kernel launch failed: ", err_str(e));
  return {normed, new_residual};
}
'''

_ext = None
_states = {}    # (T, H) -> state id
_keep = []      # symmetric buffers and handles, alive for the process lifetime


def _build():
    global _ext
    from torch.utils.cpp_extension import load_inline
    _ext = load_inline(name="kb_decode_gemv_allreduce_fused", cpp_sources=[_CPP_SRC], cuda_sources=[_CUDA_SRC],
                       functions=["create_state", "run"], extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
                       extra_cflags=["-O3"], verbose=False)


if torch.cuda.is_available():
    _build()


def _make_state(key, device):
    import torch.distributed._symmetric_memory as symm_mem

    if _ext is None:
        raise RuntimeError("this solution needs CUDA")
    world, rank = dist.get_world_size(), dist.get_rank()
    if world > _MAXW or key[0] > _MAXB:
        raise RuntimeError("at most 8 ranks and 64 tokens")
    half_bytes = (world * key[0] * key[1] * 2 + 4095) // 4096 * 4096   # [W][T*H] bf16, one parity
    buf = symm_mem.empty(_FLAG_BYTES + 2 * half_bytes, dtype=torch.uint8, device=device)
    buf[:_FLAG_BYTES].zero_()
    torch.cuda.synchronize(device)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)
    ptrs = [int(p) for p in hdl.buffer_ptrs]
    off = buf.data_ptr() - ptrs[rank]          # the tensor may sit inside a larger pool block
    sid = _ext.create_state([p + off + _FLAG_BYTES for p in ptrs], [p + off for p in ptrs], half_bytes,
                            rank, world, _TIMEOUT_NS)
    torch.cuda.synchronize(device)
    dist.barrier()             # every rank's flags are zero before anyone's first signal (setup call)
    _keep.append((buf, hdl))
    _states[key] = sid
    return sid


def solution(x, weight, residual, norm_weight):
    key = tuple(residual.shape)
    sid = _states.get(key)
    if sid is None:
        sid = _make_state(key, x.device)
    partial = F.linear(x, weight)
    normed, new_residual = _ext.run(partial, residual, norm_weight, sid)
    return normed, new_residual
