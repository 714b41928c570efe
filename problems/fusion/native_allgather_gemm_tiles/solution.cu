// All-gather + GEMM with per-tile ready flags over CUDA IPC (problems/fusion/native_allgather_gemm_tiles).
// The entry of a column-parallel linear layer under sequence parallelism: every rank pushes its rows
// of the activations into every peer's gather buffer (peer stores over NVLink) and raises a ready
// flag per chunk of rows, while its GEMM consumes the chunks of all ranks as their flags arrive.
// Every rank allocated a buffer that the harness mapped into every other rank with CUDA IPC.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXW 8                              // most ranks
#define KB_MAXC 1024                           // ready flags per source rank: chunks of its rows
#define KB_MAXB 1024                           // most blocks per launch
#define KB_FLAG_BYTES (KB_MAXW * KB_MAXC * 4)  // flags at the start of each rank's IPC buffer
#define KB_SPIN_NS 10000000000ull              // a wait longer than 10 s traps: the job fails instead of hanging

// ---- device helpers (fixed) -------------------------------------------------------------------------
__device__ __forceinline__ void kb_st_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t kb_ld_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long kb_now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Wait until *flag >= value (flags only grow; compared modulo 2^32). Traps after KB_SPIN_NS.
__device__ __forceinline__ void kb_wait_geq(const uint32_t* flag, uint32_t value) {
  const unsigned long long t0 = kb_now_ns();
  while ((int32_t)(kb_ld_acquire(flag) - value) < 0) {
    if (kb_now_ns() - t0 > KB_SPIN_NS) {
      printf("kb: block %d waited more than 10 s for flag %p to reach %u\n", blockIdx.x, flag, value);
      __trap();
    }
  }
}

// What one call works on. Gather buffers alternate by epoch parity; all flags start at 0.
struct KbArgs {
  const __nv_bfloat16* a;          // [m, k] this rank's rows of the activations
  const __nv_bfloat16* b;          // [k, n] this rank's weight shard
  __nv_bfloat16* c;                // [world * m, n] out: rows s*m .. (s+1)*m - 1 hold a_s @ b
  __nv_bfloat16* gather[KB_MAXW];  // every rank's gather buffer for this epoch (gather[rank] is local):
                                   // [world * m, k]; rows s*m .. hold rank s's a once its flags are up
  uint32_t* flags[KB_MAXW];        // every rank's ready flags [KB_MAXW (source)][KB_MAXC]: flags[q][s * KB_MAXC + j]
                                   // is raised to epoch by rank s once its chunk j of rows is in gather[q]
                                   // (how rows are cut into chunks is yours, at most KB_MAXC chunks)
  int m, n, k;
  int rank, world;
  uint32_t epoch;                  // 1, 2, 3, ...: the call number, the same on every rank
};

// >>> EDIT helpers
// A 128 x 128 output tile on tensor cores (WMMA, bfloat16 in, fp32 accumulate), 256 threads:
// 8 warps in a 2 x 4 layout, each 64 x 32 (4 x 2 fragments of 16 x 16); k steps of 32 through
// shared memory (rows padded by 8 elements against bank conflicts; WMMA wants ldm % 8 == 0).
#define KB_BM 128
#define KB_BN 128
#define KB_BK 32
#define KB_GEMM_THREADS 256
struct KbGemmSmem {
  __nv_bfloat16 a[KB_BM][KB_BK + 8];
  __nv_bfloat16 b[KB_BK][KB_BN + 8];
  float c[KB_GEMM_THREADS / 32][16 * 16];   // one 16 x 16 fp32 staging tile per warp (epilogue)
};
// C = A[rows x k] (row-major, leading dimension lda; rows <= KB_BM, the rest reads as zeros) times
// B[k x KB_BN] (row-major, leading dimension ldb). k a multiple of KB_BK, every pointer and leading
// dimension 16-byte aligned. Calls store(r, c, v) with v[0..8) = C[r][c .. c + 8) for each r < rows
// and c a multiple of 8. Every thread of the block calls it (it synchronizes the block).
template <class Store>
__device__ __forceinline__ void kb_gemm_tile(KbGemmSmem& sm, const __nv_bfloat16* A, int lda, int rows,
                                             const __nv_bfloat16* B, int ldb, int k, Store store) {
  using namespace nvcuda;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp >> 2, wn = warp & 3;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.f);
  for (int k0 = 0; k0 < k; k0 += KB_BK) {
    for (int v = tid; v < KB_BM * KB_BK / 8; v += KB_GEMM_THREADS) {
      const int r = v >> 2, c = (v & 3) * 8;
      uint4 val = make_uint4(0u, 0u, 0u, 0u);
      if (r < rows) val = *reinterpret_cast<const uint4*>(A + (size_t)r * lda + k0 + c);
      *reinterpret_cast<uint4*>(&sm.a[r][c]) = val;
    }
    for (int v = tid; v < KB_BK * KB_BN / 8; v += KB_GEMM_THREADS) {
      const int r = v >> 4, c = (v & 15) * 8;
      *reinterpret_cast<uint4*>(&sm.b[r][c]) = *reinterpret_cast<const uint4*>(B + (size_t)(k0 + r) * ldb + c);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < KB_BK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[4];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb[2];
#pragma unroll
      for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(fa[i], &sm.a[wm * 64 + i * 16][kk], KB_BK + 8);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], &sm.b[kk][wn * 32 + j * 16], KB_BN + 8);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();   // the tiles are read before the next k step overwrites them
  }
  float* st = sm.c[warp];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(st, acc[i][j], 16, wmma::mem_row_major);
      __syncwarp();
      const int r = wm * 64 + i * 16 + (lane >> 1), c = wn * 32 + j * 16 + (lane & 1) * 8;
      if (r < rows) store(r, c, st + (lane >> 1) * 16 + (lane & 1) * 8);
      __syncwarp();    // the staging tile is read before the next fragment overwrites it
    }
}
// <<< EDIT helpers

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere, every call).
__global__ void kb_ag_gemm_kernel(KbArgs a) {
  // >>> EDIT kernel
  // Phase 1: chunks of KB_BM rows of this rank's a, one per (peer, chunk) work item, stored into
  // the peers' gather buffers, each followed by its flag. Phase 2: 128 x 128 output tiles, this
  // rank's rows first (read from a itself), then ranks rank + 1, rank + 2, ..., each tile waiting
  // for the flag of its chunk. Reuse is safe: rank s writes this parity of rank q's gather buffer
  // again two epochs later, after its phase 2 of the epoch in between waited for every chunk flag
  // of rank q, raised only once rank q's kernel of this epoch (all its reads) was done.
  __shared__ __align__(128) KbGemmSmem sm;
  const int nch = (a.m + KB_BM - 1) / KB_BM, tn = a.n / KB_BN;
  const size_t hv = (size_t)a.k / 8;                      // 16-byte vectors per row
  for (int j = blockIdx.x; j < (a.world - 1) * nch; j += gridDim.x) {
    const int dst = (a.rank + 1 + j / nch) % a.world, ch = j % nch;
    const int r0 = ch * KB_BM, rows = min(KB_BM, a.m - r0);
    const uint4* from = reinterpret_cast<const uint4*>(a.a + (size_t)r0 * a.k);
    uint4* to = reinterpret_cast<uint4*>(a.gather[dst] + ((size_t)a.rank * a.m + r0) * a.k);
    for (size_t v = threadIdx.x; v < (size_t)rows * hv; v += blockDim.x) to[v] = from[v];
    __syncthreads();   // the whole chunk is stored before its flag goes up
    if (threadIdx.x == 0) {
      __threadfence_system();
      kb_st_release(&a.flags[dst][a.rank * KB_MAXC + ch], a.epoch);
    }
  }
  const int per_src = nch * tn;
  for (int j = blockIdx.x; j < a.world * per_src; j += gridDim.x) {
    const int s = (a.rank + j / per_src) % a.world, t = j % per_src, ch = t / tn, nt = t % tn;
    const int r0 = ch * KB_BM, rows = min(KB_BM, a.m - r0);
    const __nv_bfloat16* A = a.a + (size_t)r0 * a.k;
    if (s != a.rank) {                                    // the same s for the whole block
      if (threadIdx.x == 0) kb_wait_geq(&a.flags[a.rank][s * KB_MAXC + ch], a.epoch);
      __syncthreads();
      A = a.gather[a.rank] + ((size_t)s * a.m + r0) * a.k;
    }
    __nv_bfloat16* C = a.c + ((size_t)s * a.m + r0) * a.n + (size_t)nt * KB_BN;
    const int n = a.n;
    kb_gemm_tile(sm, A, a.k, rows, a.b + (size_t)nt * KB_BN, a.n, a.k, [&](int r, int col, const float* v) {
      uint4 o;
      __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
      for (int i = 0; i < 4; ++i) oh[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
      *reinterpret_cast<uint4*>(C + (size_t)r * n + col) = o;
    });
  }
  // <<< EDIT kernel
}

// Blocks (at most KB_MAXB, all resident at once), threads per block (a multiple of 32) and dynamic
// shared memory bytes per block, chosen once at setup for every call of every size.
static void kb_launch_shape(int* blocks, int* threads, int* smem_bytes) {
  // >>> EDIT launch
  // persistent blocks, as many as are resident at once (the tile helper wants 256 threads)
  int dev = 0, sms = 132, per_sm = 1;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kb_ag_gemm_kernel, KB_GEMM_THREADS, 0);
  per_sm = per_sm < 1 ? 1 : (per_sm > 2 ? 2 : per_sm);
  *blocks = sms * per_sm < KB_MAXB ? sms * per_sm : KB_MAXB;
  *threads = KB_GEMM_THREADS;
  *smem_bytes = 0;
  // <<< EDIT launch
}

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static char kb_error[256];
static KbArgs kb_base;              // pointers of epoch parity 0
static long long kb_gather_elems;   // bfloat16 elements of one parity's gather buffer (at least world * m * k)
static uint32_t kb_epoch;
static int kb_blocks, kb_threads, kb_smem;

extern "C" const char* kb_last_error() { return kb_error; }

static int kb_fail(cudaError_t e, const char* what) {
  snprintf(kb_error, sizeof(kb_error), "%s: %s", what, cudaGetErrorString(e));
  return (int)e;
}
#define KB_CHECK(call)                            \
  do {                                            \
    cudaError_t e_ = (call);                      \
    if (e_ != cudaSuccess) return kb_fail(e_, #call); \
  } while (0)

extern "C" int kb_init(int device) {
  KB_CHECK(cudaSetDevice(device));
  return 0;
}

// Bytes of each rank's IPC buffer: the flags, then two parities of a gather buffer of
// gather_elems bfloat16 (the largest world * m * k).
extern "C" size_t kb_buffer_bytes(long long gather_elems) { return KB_FLAG_BYTES + 2 * (size_t)gather_elems * 2; }

extern "C" int kb_ipc_alloc(size_t bytes, void** ptr, void* handle) {
  KB_CHECK(cudaMalloc(ptr, bytes));
  KB_CHECK(cudaMemset(*ptr, 0, bytes));
  KB_CHECK(cudaDeviceSynchronize());
  KB_CHECK(cudaIpcGetMemHandle((cudaIpcMemHandle_t*)handle, *ptr));
  return 0;
}

extern "C" int kb_ipc_open(const void* handle, void** ptr) {
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof(h));
  KB_CHECK(cudaIpcOpenMemHandle(ptr, h, cudaIpcMemLazyEnablePeerAccess));
  return 0;
}

// bufs: every rank's IPC buffer as mapped here (bufs[rank] is this rank's own).
extern "C" int kb_setup(int rank, int world, void* const* bufs, long long gather_elems) {
  if (world < 1 || world > KB_MAXW) {
    snprintf(kb_error, sizeof(kb_error), "world size %d (1..%d)", world, KB_MAXW);
    return -1;
  }
  memset(&kb_base, 0, sizeof(kb_base));
  for (int q = 0; q < world; ++q) {
    kb_base.flags[q] = (uint32_t*)bufs[q];
    kb_base.gather[q] = (__nv_bfloat16*)((char*)bufs[q] + KB_FLAG_BYTES);
  }
  kb_base.rank = rank;
  kb_base.world = world;
  kb_gather_elems = gather_elems;
  kb_epoch = 0;
  kb_blocks = 1;
  kb_threads = 32;
  kb_smem = 0;
  kb_launch_shape(&kb_blocks, &kb_threads, &kb_smem);
  if (kb_blocks < 1 || kb_blocks > KB_MAXB || kb_threads < 32 || kb_threads > 1024 || kb_threads % 32 != 0 ||
      kb_smem < 0) {
    snprintf(kb_error, sizeof(kb_error), "kb_launch_shape chose %d blocks of %d threads, %d bytes (1..%d, 32..1024 by 32)",
             kb_blocks, kb_threads, kb_smem, KB_MAXB);
    return -1;
  }
  if (kb_smem > 48 * 1024)
    KB_CHECK(cudaFuncSetAttribute(kb_ag_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kb_smem));
  // blocks wait for chunks other blocks (on the peers) store: all must be resident at once
  int dev = 0, sms = 0, per_sm = 0;
  KB_CHECK(cudaGetDevice(&dev));
  KB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  KB_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kb_ag_gemm_kernel, kb_threads, kb_smem));
  if (kb_blocks > per_sm * sms) {
    snprintf(kb_error, sizeof(kb_error), "%d blocks of %d threads cannot all be resident (%d SMs x %d blocks)",
             kb_blocks, kb_threads, sms, per_sm);
    return -1;
  }
  return 0;
}

// c <- (all-gather over ranks of a) @ b (a bfloat16 [m, k], b bfloat16 [k, n], c bfloat16
// [world * m, n]), on `stream`; m, n, k the same on every rank.
extern "C" int kb_ag_gemm(const void* a, const void* b, void* c, int m, int n, int k, cudaStream_t stream) {
  if (m < 1 || n < 1 || k < 1 || m % 16 != 0 || n % 128 != 0 || k % 32 != 0 ||
      (long long)kb_base.world * m * k > kb_gather_elems) {
    snprintf(kb_error, sizeof(kb_error), "bad shape m=%d n=%d k=%d (m a multiple of 16, n of 128, k of 32, "
             "world * m * k at most %lld)", m, n, k, kb_gather_elems);
    return -1;
  }
  KbArgs args = kb_base;
  args.epoch = ++kb_epoch;
  for (int q = 0; q < args.world; ++q) args.gather[q] += (size_t)kb_gather_elems * (args.epoch & 1);
  args.a = (const __nv_bfloat16*)a;
  args.b = (const __nv_bfloat16*)b;
  args.c = (__nv_bfloat16*)c;
  args.m = m;
  args.n = n;
  args.k = k;
  kb_ag_gemm_kernel<<<kb_blocks, kb_threads, kb_smem, stream>>>(args);
  KB_CHECK(cudaGetLastError());
  return 0;
}
