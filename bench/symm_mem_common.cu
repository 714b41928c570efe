//! The CUDA part shared by the four shipped symm_mem solutions
//! (problems/collective/{all_reduce,all_gather,reduce_scatter,all_to_all}/solutions/symm_mem.py):
//! flag barrier, bf16 pack/unpack, element ranges, copy / broadcast / reduce loops.
//! Each solution is a single-file candidate, so it carries its own copy of the lines below
//! (these `//!` lines excepted) between the markers `// >>> shared: bench/symm_mem_common.cu`
//! and `// <<< shared: bench/symm_mem_common.cu`. Edit here, then run
//!     python bench/gen_symm_mem.py            (rewrites the four copies)
//!     python bench/gen_symm_mem.py --check    (exit 1 when a copy differs; tests/test_symm_mem_sources.py)
//! The text goes into a Python r'''...''' string: no triple quotes, and none of the words
//! that pytest_kernelbench/safety.py scan() refuses in a candidate.
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
