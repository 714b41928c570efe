"""All-reduce (sum), bfloat16: out[n] = sum over ranks of x[n].

Hand-written CUDA over torch symmetric memory (NVLink peer loads/stores), no NCCL in
the hot path. One kernel per call, reading x in place:
  - oneshot_push (small sizes): x is written into every peer's slot (NVLink stores),
    one barrier, then each rank sums the W slots locally (fp32, rank order: identical
    results on every rank).
  - twoshot (large sizes): reduce-scatter by pushing chunk q of x to rank q, barrier,
    each rank reduces its chunk into out and a symmetric copy, barrier, then each rank
    pulls the other reduced chunks from the peers (NVLink loads) straight into out.
  - oneshot_pull / twoshot_pull: the same with x staged locally and peers read.
Synchronization: per-block flag barriers between the same block index on every
rank (st.release.sys of a monotonically growing epoch into the peer's flag slot,
ld.acquire.sys spin on our own slot). The symmetric data area is double-buffered
by epoch parity, so a call never writes memory that a peer may still read for the
previous call (a peer can only be one barrier behind). Every call returns a freshly
allocated output tensor; x is never written.

One-time setup per input size (first call with that size): symmetric allocation +
rendezvous (collective). Only peer loads/stores over NVLink are used.
"""
import os

import torch
import torch.distributed as dist

_EXT_NAME = "kb_allreduce_symm_v2"
ALGOS = {"oneshot_push": 0, "twoshot": 1, "oneshot_pull": 2, "twoshot_pull": 3}
ALGO = None    # dev override: an id from ALGOS (None = pick by size)
GRID = None    # dev override: blocks per launch (None = pick by size)
FENCE = 0      # 1: every thread also runs __threadfence_system() before a barrier (not
               # needed: bar.sync + one thread's st.release.sys is cumulative in the PTX
               # memory model, the same pattern as cooperative-groups grid sync; costs 1-3 us)
NCHUNK = None  # dev override: rounds per block (pipelining); None = pick by size
DEV_FLAGS = 0  # dev switches: 1 = run the 8-rank kernel at any W, 2 = scalar (V=1) kernel
_THREADS = 512
_FLAG_BYTES = 2 * 1024 * 8 * 4   # [phase][block][rank] u32 flags, see KB_NPH/KB_MAXB/KB_MAXW
_TIMEOUT_NS = int(float(os.environ.get("KB_SPIN_TIMEOUT_S", "60")) * 1e9)

_CUDA_SRC = r'''
// >>> shared: bench/symm_mem_common.cu  (identical in the four symm_mem solutions: edit it there, then run python bench/gen_symm_mem.py)
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>

#define KB_MAXW 8      // most ranks supported
#define KB_MAXB 1024   // most blocks a launch may use (flag slots per phase)
#define KB_NPH 2       // barrier phases per launch
#define KB_THREADS 512

struct KbParams {
  const void* x;                // this rank's input (local, not symmetric)
  void* out;                    // this rank's fresh output (local)
  void* data[KB_MAXW];          // every rank's symmetric data area, this call's parity half
  uint32_t* flags[KB_MAXW];     // every rank's flag area [KB_NPH][KB_MAXB][KB_MAXW] u32
  long long n;                  // elements of x
  long long timeout_ns;         // spin limit before __trap()
  int rank;
  int world;
  int algo;
  int fence;                    // 1: every thread runs __threadfence_system() before a barrier
  int nchunk;                   // rounds per block (pipelining); flag value = epoch*nchunk + round
  unsigned int epoch;           // call counter of this state, identical on all ranks
};

__device__ __forceinline__ void kb_st_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t kb_ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long kb_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Barrier between block blockIdx.x of every rank. Thread t < world stores `val`
// (epoch*nchunk + round) into rank t's slot [ph][block][me] (release, system
// scope), then waits until its own slot [ph][block][t] holds at least `val`
// (acquire). Values only grow, so slots never need resetting and consecutive
// calls or rounds cannot confuse each other.
__device__ __forceinline__ void kb_barrier(const KbParams& p, int ph, unsigned int val) {
  if (p.fence) __threadfence_system();
  __syncthreads();
  const int t = threadIdx.x;
  if (t < p.world) {
    const long long slot = ((long long)ph * KB_MAXB + blockIdx.x) * KB_MAXW;
    kb_st_release(p.flags[t] + slot + p.rank, val);
    const uint32_t* mine = p.flags[p.rank] + slot + t;
    if ((int)(kb_ld_acquire(mine) - val) < 0) {
      const unsigned long long t0 = kb_globaltimer();
      unsigned int spins = 0;
      while ((int)(kb_ld_acquire(mine) - val) < 0) {
        if ((++spins & 1023u) == 0u &&
            (long long)(kb_globaltimer() - t0) > p.timeout_ns) {
          printf("kb symm_mem: rank %d block %d phase %d: no signal from rank %d "
                 "for value %u (timeout), trapping\n",
                 p.rank, (int)blockIdx.x, ph, t, val);
          __trap();
        }
      }
    }
  }
  __syncthreads();
}

__device__ __forceinline__ uint32_t kb_pack2(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

template <int V> struct KbVec;
template <> struct KbVec<8> {   // 8 bf16 = 16 bytes
  typedef uint4 T;
  static __device__ __forceinline__ void set(float (&a)[8], const uint4& v) {
    a[0] = __uint_as_float(v.x << 16); a[1] = __uint_as_float(v.x & 0xffff0000u);
    a[2] = __uint_as_float(v.y << 16); a[3] = __uint_as_float(v.y & 0xffff0000u);
    a[4] = __uint_as_float(v.z << 16); a[5] = __uint_as_float(v.z & 0xffff0000u);
    a[6] = __uint_as_float(v.w << 16); a[7] = __uint_as_float(v.w & 0xffff0000u);
  }
  static __device__ __forceinline__ void add(float (&a)[8], const uint4& v) {
    a[0] += __uint_as_float(v.x << 16); a[1] += __uint_as_float(v.x & 0xffff0000u);
    a[2] += __uint_as_float(v.y << 16); a[3] += __uint_as_float(v.y & 0xffff0000u);
    a[4] += __uint_as_float(v.z << 16); a[5] += __uint_as_float(v.z & 0xffff0000u);
    a[6] += __uint_as_float(v.w << 16); a[7] += __uint_as_float(v.w & 0xffff0000u);
  }
  static __device__ __forceinline__ uint4 pack(const float (&a)[8]) {
    uint4 r;
    r.x = kb_pack2(a[0], a[1]); r.y = kb_pack2(a[2], a[3]);
    r.z = kb_pack2(a[4], a[5]); r.w = kb_pack2(a[6], a[7]);
    return r;
  }
};
template <> struct KbVec<1> {   // 1 bf16: fallback for unaligned sizes / pointers
  typedef unsigned short T;
  static __device__ __forceinline__ void set(float (&a)[1], const unsigned short& v) {
    a[0] = __uint_as_float(((uint32_t)v) << 16);
  }
  static __device__ __forceinline__ void add(float (&a)[1], const unsigned short& v) {
    a[0] += __uint_as_float(((uint32_t)v) << 16);
  }
  static __device__ __forceinline__ unsigned short pack(const float (&a)[1]) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(a[0]));
  }
};

// pointer to element `off` (bf16 elements) of `base`, as a pack pointer
template <typename T>
__device__ __forceinline__ T* kb_at(const void* base, long long off) {
  return reinterpret_cast<T*>(const_cast<char*>(reinterpret_cast<const char*>(base)) + off * 2);
}

// This block's share [e0, e1) of a range of L elements. Shares are whole
// multiples of 8 elements, so V=1 and V=8 launches split alike.
__device__ __forceinline__ void kb_range(long long L, long long& e0, long long& e1) {
  long long per = (L + gridDim.x - 1) / gridDim.x;
  per = (per + 7) & ~7LL;
  long long b = per * blockIdx.x, e = b + per;
  if (b > L) b = L;
  if (e > L) e = L;
  e0 = b;
  e1 = e;
}

// Round k of K of the block share [e0, e1), as packs of V: [beg, end).
template <int V>
__device__ __forceinline__ void kb_sub(long long e0, long long e1, int K, int k,
                                       long long& beg, long long& end) {
  long long per = (e1 - e0 + K - 1) / K;
  per = (per + 7) & ~7LL;
  long long b = e0 + per * k, e = b + per;
  if (b > e1) b = e1;
  if (e > e1) e = e1;
  beg = b / V;
  end = e / V;
}

// dst[s][i] = src[s][i] for s < ns, i in [beg, end): all segments in flight together
template <int V, int NS, int U>
__device__ __forceinline__ void kb_copy(typename KbVec<V>::T* (&dst)[NS],
                                        const typename KbVec<V>::T* (&src)[NS],
                                        int ns, long long beg, long long end) {
  typedef typename KbVec<V>::T T;
  const long long bd = blockDim.x;
  for (long long i0 = beg + threadIdx.x; i0 < end; i0 += bd * U) {
    T v[NS][U];
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      if (s < ns) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const long long i = i0 + u * bd;
          if (i < end) v[s][u] = src[s][i];
        }
      }
    }
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      if (s < ns) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const long long i = i0 + u * bd;
          if (i < end) dst[s][i] = v[s][u];
        }
      }
    }
  }
}

// dst[s][i] = src[i] for s < ns
template <int V, int NS, int U>
__device__ __forceinline__ void kb_bcast(typename KbVec<V>::T* (&dst)[NS], int ns,
                                         const typename KbVec<V>::T* src,
                                         long long beg, long long end) {
  typedef typename KbVec<V>::T T;
  const long long bd = blockDim.x;
  for (long long i0 = beg + threadIdx.x; i0 < end; i0 += bd * U) {
    T v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long i = i0 + u * bd;
      if (i < end) v[u] = src[i];
    }
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      if (s < ns) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const long long i = i0 + u * bd;
          if (i < end) dst[s][i] = v[u];
        }
      }
    }
  }
}

// dst[i] (and dst2[i] when dst2 != nullptr) = sum over s < ns of src[s][i],
// fp32 accumulation in source order (the same order on every rank).
template <int V, int NS, int U>
__device__ __forceinline__ void kb_reduce(typename KbVec<V>::T* dst, typename KbVec<V>::T* dst2,
                                          const typename KbVec<V>::T* (&src)[NS],
                                          int ns, long long beg, long long end) {
  typedef typename KbVec<V>::T T;
  const long long bd = blockDim.x;
  for (long long i0 = beg + threadIdx.x; i0 < end; i0 += bd * U) {
    T v[NS][U];
#pragma unroll
    for (int s = 0; s < NS; ++s) {
      if (s < ns) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const long long i = i0 + u * bd;
          if (i < end) v[s][u] = src[s][i];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float a[V];
      KbVec<V>::set(a, v[0][u]);
#pragma unroll
      for (int s = 1; s < NS; ++s) {
        if (s < ns) KbVec<V>::add(a, v[s][u]);
      }
      const long long i = i0 + u * bd;
      if (i < end) {
        const T r = KbVec<V>::pack(a);
        dst[i] = r;
        if (dst2 != nullptr) dst2[i] = r;
      }
    }
  }
}

#define KB_UC ((4 / NS) > 0 ? (4 / NS) : 1)
#define KB_UR ((2 / NS) > 0 ? (2 / NS) : 1)
// <<< shared: bench/symm_mem_common.cu

// ---- all_reduce: out[n] = sum over ranks of x[n] ----
// algo 0 one-shot push : x -> every peer's slot[me] (remote writes); barrier; out = sum of slots
//                        layout per parity half: slots [W][n]
// algo 1 two-shot      : x chunk q -> peer q's slot[me] (remote writes); barrier;
//                        reduce own chunk -> out and red; barrier; pull peers' red chunks -> out
//                        layout: slots [W][c], red [c] at offset W*c   (c = n / W)
// algo 2 one-shot pull : x -> own stage; barrier; out = sum of every rank's stage (remote reads)
//                        layout: stage [n]
// algo 3 two-shot pull : x -> own stage (all chunks but mine); barrier; reduce own chunk by
//                        remote reads -> out and red; barrier; pull peers' red chunks -> out
//                        layout: stage [n], red [c] at offset n
// Each block owns the same element share on every rank and walks it in p.nchunk rounds.
template <int V, int NS>
__global__ void __launch_bounds__(KB_THREADS, 2) kb_kernel(const __grid_constant__ KbParams p) {
  typedef typename KbVec<V>::T T;
  const int W = p.world, rank = p.rank, K = p.nchunk;
  const long long n = p.n, c = n / W;
  const T* x = reinterpret_cast<const T*>(p.x);
  const bool oneshot = (p.algo == 0 || p.algo == 2);
  long long e0, e1, b0, b1;
  kb_range(oneshot ? n : c, e0, e1);
  for (int k = 0; k < K; ++k) {
    const unsigned int val = p.epoch * (unsigned int)K + (unsigned int)k;
    kb_sub<V>(e0, e1, K, k, b0, b1);
    if (oneshot) {
      {
        T* dst[NS];
#pragma unroll
        for (int s = 0; s < NS; ++s)
          dst[s] = p.algo == 0 ? kb_at<T>(p.data[(rank + 1 + s) % W], (long long)rank * n)
                               : kb_at<T>(p.data[rank], 0);
        kb_bcast<V, NS, KB_UC>(dst, p.algo == 0 ? W - 1 : 1, x, b0, b1);
      }
      kb_barrier(p, 0, val);
      {
        const T* src[NS];
#pragma unroll
        for (int s = 0; s < NS; ++s) {
          const int r = s < W ? s : 0;
          src[s] = (r == rank) ? x : (p.algo == 0 ? kb_at<T>(p.data[rank], (long long)r * n)
                                                  : kb_at<T>(p.data[r], 0));
        }
        kb_reduce<V, NS, KB_UR>(reinterpret_cast<T*>(p.out), nullptr, src, W, b0, b1);
      }
    } else {
      {
        T* dst[NS];
        const T* src[NS];
#pragma unroll
        for (int s = 0; s < NS; ++s) {
          const int q = (rank + 1 + s) % W;
          dst[s] = p.algo == 1 ? kb_at<T>(p.data[q], (long long)rank * c)
                               : kb_at<T>(p.data[rank], (long long)q * c);
          src[s] = kb_at<T>(p.x, (long long)q * c);
        }
        kb_copy<V, NS, KB_UC>(dst, src, W - 1, b0, b1);
      }
      kb_barrier(p, 0, val);
      const long long red = p.algo == 1 ? (long long)W * c : n;
      {
        const T* src[NS];
#pragma unroll
        for (int s = 0; s < NS; ++s) {
          const int r = s < W ? s : 0;
          src[s] = (r == rank) ? kb_at<T>(p.x, (long long)rank * c)
                               : (p.algo == 1 ? kb_at<T>(p.data[rank], (long long)r * c)
                                              : kb_at<T>(p.data[r], (long long)rank * c));
        }
        kb_reduce<V, NS, KB_UR>(kb_at<T>(p.out, (long long)rank * c), kb_at<T>(p.data[rank], red),
                                src, W, b0, b1);
      }
      kb_barrier(p, 1, val);
      {
        T* dst[NS];
        const T* src[NS];
#pragma unroll
        for (int s = 0; s < NS; ++s) {
          const int q = (rank + 1 + s) % W;
          dst[s] = kb_at<T>(p.out, (long long)q * c);
          src[s] = kb_at<T>(p.data[q], red);
        }
        kb_copy<V, NS, KB_UC>(dst, src, W - 1, b0, b1);
      }
    }
  }
}

// >>> shared: bench/symm_mem_host.cu  (identical in the four symm_mem solutions: edit it there, then run python bench/gen_symm_mem.py)
// ---- host-side launch helpers (no torch headers in this file: fast nvcc) ----
template <int V, int NS>
static cudaError_t kb_launch_t(const KbParams& p, int grid, int threads, cudaStream_t st) {
  kb_kernel<V, NS><<<grid, threads, 0, st>>>(p);
  return cudaGetLastError();
}

int kb_launch(int vec, int ns8, int grid, int threads, const void* x, void* out,
              const long long* data, const long long* flags, long long n, int rank,
              int world, int algo, int fence, int nchunk, long long timeout_ns, unsigned int epoch,
              void* stream) {
  KbParams p;
  p.x = x;
  p.out = out;
  for (int r = 0; r < KB_MAXW; ++r) {
    p.data[r] = r < world ? reinterpret_cast<void*>(data[r]) : nullptr;
    p.flags[r] = r < world ? reinterpret_cast<uint32_t*>(flags[r]) : nullptr;
  }
  p.n = n;
  p.timeout_ns = timeout_ns;
  p.rank = rank;
  p.world = world;
  p.algo = algo;
  p.fence = fence;
  p.nchunk = nchunk;
  p.epoch = epoch;
  cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
  cudaError_t e;
  const int wsel = ns8 ? 8 : world;   // ns8: dev switch, run the 8-rank kernel at any W
  if (vec == 8) {
    if (wsel <= 2) e = kb_launch_t<8, 2>(p, grid, threads, st);
    else if (wsel <= 4) e = kb_launch_t<8, 4>(p, grid, threads, st);
    else e = kb_launch_t<8, 8>(p, grid, threads, st);
  } else {
    if (wsel <= 2) e = kb_launch_t<1, 2>(p, grid, threads, st);
    else if (wsel <= 4) e = kb_launch_t<1, 4>(p, grid, threads, st);
    else e = kb_launch_t<1, 8>(p, grid, threads, st);
  }
  return (int)e;
}

template <int V, int NS>
static int kb_occ(int threads) {
  int nb = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kb_kernel<V, NS>, threads, 0) != cudaSuccess) return -1;
  return nb;
}

// blocks of `threads` threads that are resident at once on the current device
// (the smaller of the V=1 and V=8 kernels), capped at KB_MAXB
int kb_max_blocks(int world, int threads) {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return -1;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return -1;
  int a, b;
  if (world <= 2) { a = kb_occ<8, 2>(threads); b = kb_occ<1, 2>(threads); }
  else if (world <= 4) { a = kb_occ<8, 4>(threads); b = kb_occ<1, 4>(threads); }
  else { a = kb_occ<8, 8>(threads); b = kb_occ<1, 8>(threads); }
  int occ = a < b ? a : b;
  if (occ <= 0) return -1;
  long long m = (long long)occ * sms;
  return (int)(m < KB_MAXB ? m : KB_MAXB);
}

int kb_sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return -1;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return -1;
  return sms;
}

const char* kb_err_str(int e) { return cudaGetErrorString((cudaError_t)e); }

// <<< shared: bench/symm_mem_host.cu
'''

_CPP_SRC = r'''
// >>> shared: bench/symm_mem_binding.cpp  (identical in the four symm_mem solutions: edit it there, then run python bench/gen_symm_mem.py)
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <vector>

int kb_launch(int vec, int ns8, int grid, int threads, const void* x, void* out,
              const long long* data, const long long* flags, long long n, int rank,
              int world, int algo, int fence, int nchunk, long long timeout_ns, unsigned int epoch,
              void* stream);
int kb_max_blocks(int world, int threads);
int kb_sm_count();
const char* kb_err_str(int e);

struct KbState {
  long long data_base[8];
  long long flags[8];
  long long half_bytes;
  long long n;
  long long out_numel;
  long long timeout_ns;
  int rank, world, algo, grid, threads, fence, nchunk;
  unsigned int epoch;
  bool vec_ok;
  int dev_flags;   // dev switches: 1 = 8-rank kernel at any W, 2 = scalar (V=1) kernel
};

static std::vector<KbState> g_states;

int64_t create_state(std::vector<int64_t> data_base, std::vector<int64_t> flags,
                     int64_t half_bytes, int64_t n, int64_t out_numel, int64_t rank,
                     int64_t world, int64_t algo, int64_t grid, int64_t threads,
                     int64_t fence, int64_t nchunk, int64_t timeout_ns, int64_t vec_ok,
                     int64_t dev_flags) {
  TORCH_CHECK(world >= 1 && world <= 8, "kb: world size must be 1..8");
  TORCH_CHECK((int64_t)data_base.size() == world && (int64_t)flags.size() == world);
  TORCH_CHECK(grid >= 1 && grid <= 1024, "kb: grid out of range");
  TORCH_CHECK(nchunk >= 1 && nchunk <= 64, "kb: nchunk out of range");
  KbState s;
  for (int r = 0; r < 8; ++r) {
    s.data_base[r] = r < world ? data_base[r] : 0;
    s.flags[r] = r < world ? flags[r] : 0;
  }
  s.half_bytes = half_bytes;
  s.n = n;
  s.out_numel = out_numel;
  s.timeout_ns = timeout_ns;
  s.rank = (int)rank;
  s.world = (int)world;
  s.algo = (int)algo;
  s.grid = (int)grid;
  s.threads = (int)threads;
  s.fence = (int)fence;
  s.nchunk = (int)nchunk;
  s.epoch = 0;
  s.vec_ok = vec_ok != 0;
  s.dev_flags = (int)dev_flags;
  g_states.push_back(s);
  return (int64_t)g_states.size() - 1;
}

int64_t max_blocks(int64_t world, int64_t threads) { return kb_max_blocks((int)world, (int)threads); }
int64_t sm_count() { return kb_sm_count(); }

torch::Tensor run(const torch::Tensor& x, int64_t sid) {
  TORCH_CHECK(sid >= 0 && sid < (int64_t)g_states.size(), "kb: bad state id");
  KbState& s = g_states[sid];
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kBFloat16 && x.is_contiguous(),
              "kb: x must be a contiguous bfloat16 CUDA tensor");
  TORCH_CHECK(x.numel() == s.n, "kb: size mismatch");
  const c10::cuda::CUDAGuard guard(x.device());
  torch::Tensor out = at::empty({s.out_numel}, x.options());
  if (s.n == 0) return out;
  s.epoch += 1;
  const long long par = (long long)(s.epoch & 1u);
  long long data[8];
  for (int r = 0; r < 8; ++r) data[r] = s.data_base[r] ? s.data_base[r] + par * s.half_bytes : 0;
  const bool aligned = (reinterpret_cast<uintptr_t>(x.data_ptr()) & 15) == 0;
  const int vec = (s.vec_ok && aligned && !(s.dev_flags & 2)) ? 8 : 1;
  cudaStream_t st = c10::cuda::getCurrentCUDAStream().stream();
  int e = kb_launch(vec, s.dev_flags & 1, s.grid, s.threads, x.data_ptr(), out.data_ptr(), data, s.flags, s.n,
                    s.rank, s.world, s.algo, s.fence, s.nchunk, s.timeout_ns, s.epoch, (void*)st);
  TORCH_CHECK(e == 0, "kb: kernel launch failed: ", kb_err_str(e));
  return out;
}

// <<< shared: bench/symm_mem_binding.cpp
'''


def _check_algo(algo, n, world):
    if algo not in ALGOS.values():
        raise ValueError("unknown algo %r" % (algo,))
    if algo in (1, 3) and n % world != 0:
        return 0
    return algo


def _default_algo(n, world):
    # one-shot moves (W-1)*n bytes per rank over the links with one barrier, two-shot
    # 2*(W-1)/W*n with two: at W=2 the traffic is equal and one-shot wins up to 16 MiB
    if world <= 2:
        return 0 if 2 * n <= 33554432 else 1
    return 0 if 2 * n * (world - 1) <= 524288 * 3 else 1


def _layout_elems(algo, n, world):
    c = n // world
    return {0: world * n, 1: world * c + c, 2: n, 3: n + c}[algo]


def _range_elems(algo, n, world):
    return n if algo in (0, 2) else n // world


def _default_nchunk(algo, n, world):
    # rounds per block; more than one measured slower for two-shot at 16 and 256 MiB (W=4)
    return 1


def _out_numel(n, world):
    return n


# >>> shared: bench/symm_mem_state.py.in  (identical in the four symm_mem solutions: edit it there, then run python bench/gen_symm_mem.py)
_ext = None


def _build():
    global _ext
    import inspect
    from torch.utils.cpp_extension import load_inline

    kw = {}
    if "no_implicit_headers" in inspect.signature(load_inline).parameters:
        kw["no_implicit_headers"] = True   # keep torch headers out of the .cu: faster nvcc
    _ext = load_inline(
        name=_EXT_NAME,
        cpp_sources=[_CPP_SRC],
        cuda_sources=[_CUDA_SRC],
        functions=["create_state", "run", "max_blocks", "sm_count"],
        extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
        extra_cflags=["-O3"],
        with_pytorch_error_handling=False,
        verbose=False,
        **kw,
    )


if torch.cuda.is_available():
    _build()

_states = {}   # (n, ALGO, GRID, FENCE, NCHUNK, DEV_FLAGS) -> state id in the extension
_keep = []     # symmetric tensors and handles, alive for the process lifetime
_max_blocks = {}


def _symm_empty(symm_mem, nbytes, dev):
    # A dedicated allocation (own block, offset 0) where this torch has the direct
    # allocator; symm_mem.empty (possibly a sub-allocation of a pool block) otherwise.
    try:
        from torch._C._distributed_c10d import _SymmetricMemory
        return _SymmetricMemory.empty_strided_p2p((nbytes,), (1,), torch.uint8, dev)
    except (ImportError, AttributeError, TypeError):
        return symm_mem.empty(nbytes, dtype=torch.uint8, device=dev)


def _make_state(x, key):
    import torch.distributed._symmetric_memory as symm_mem

    if _ext is None:
        raise RuntimeError("symm_mem solution needs CUDA")
    n = x.numel()
    world = dist.get_world_size()
    rank = dist.get_rank()
    if world > 8:
        raise RuntimeError("symm_mem solution supports at most 8 ranks")
    algo = key[1] if key[1] is not None else _default_algo(n, world)
    algo = _check_algo(algo, n, world)
    dev = x.device
    half_elems = _layout_elems(algo, n, world)
    half_bytes = (half_elems * 2 + 4095) // 4096 * 4096
    total = _FLAG_BYTES + 2 * half_bytes
    buf = _symm_empty(symm_mem, total, dev)
    buf[:_FLAG_BYTES].zero_()
    torch.cuda.synchronize(dev)
    group = dist.group.WORLD
    hdl = symm_mem.rendezvous(buf, group.group_name)
    if hdl.world_size != world or hdl.rank != rank:
        raise RuntimeError("symm_mem rendezvous: unexpected rank/world size")
    ptrs = [int(p) for p in hdl.buffer_ptrs]
    off = buf.data_ptr() - ptrs[rank]   # our tensor may sit inside a larger pool block
    if off < 0 or off >= (1 << 40):
        raise RuntimeError("symm_mem rendezvous: unexpected buffer offset")
    flags = [p + off for p in ptrs]
    data = [p + off + _FLAG_BYTES for p in ptrs]
    if world not in _max_blocks:
        _max_blocks[world] = int(_ext.max_blocks(world, _THREADS))
        if _max_blocks[world] <= 0:
            raise RuntimeError("symm_mem solution: occupancy query failed")
    cap = min(_max_blocks[world], 2 * int(_ext.sm_count()), 1024)
    if key[2] is not None:
        grid = max(1, min(int(key[2]), cap))
    else:
        grid = max(1, min(cap, -(-_range_elems(algo, n, world) // (8 * _THREADS))))
    nchunk = int(key[4]) if key[4] is not None else _default_nchunk(algo, n, world)
    vec_ok = 1 if n % (8 * world) == 0 else 0
    sid = _ext.create_state(data, flags, half_bytes, n, _out_numel(n, world), rank, world, algo,
                            grid, _THREADS, int(key[3]), nchunk, _TIMEOUT_NS, vec_ok,
                            int(key[5]))
    torch.cuda.synchronize(dev)
    _keep.append((buf, hdl))
    _states[key] = sid
    return sid


def solution(x: torch.Tensor) -> torch.Tensor:
    key = (x.numel(), ALGO, GRID, FENCE, NCHUNK, DEV_FLAGS)
    sid = _states.get(key)
    if sid is None:
        sid = _make_state(x, key)
    return _ext.run(x, sid)
# <<< shared: bench/symm_mem_state.py.in
