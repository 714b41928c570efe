// Cross-GPU barrier in a kernel over CUDA IPC flags (problems/utility/gpu_barrier_kernel).
// Every rank's buffer (flag words, then two gather buffers) is mapped into every other rank with
// CUDA IPC (done by the harness). The fixed kernel stores, meets at kb_grid_barrier, and gathers.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXW 8                               // most ranks
#define KB_BLOCKS 16                            // blocks per launch (fixed; all resident at once)
#define KB_THREADS 256                          // threads per block (fixed)
#define KB_FLAG_WORDS 1024                      // flag words at the start of each rank's buffer (all 0 at first)
#define KB_FLAG_BYTES (KB_FLAG_WORDS * 4)
#define KB_SPIN_NS 10000000000ull               // a wait longer than 10 s traps: the job fails instead of hanging

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

// What the barrier gets: every rank's flag words, who this is, and the call number.
struct KbBarrier {
  uint32_t* flags[KB_MAXW];   // every rank's KB_FLAG_WORDS flag words (flags[rank] is local); all 0 at first
  int rank, world;
  uint32_t epoch;             // 1, 2, 3, ...: the call number, the same on every rank
};

// >>> EDIT helpers
// (optional) helpers for kb_grid_barrier
// <<< EDIT helpers

// Called once per call by every thread of every block (KB_BLOCKS blocks of KB_THREADS threads) of
// every rank. Returns in none until all blocks of all ranks have called it; every store made before
// the call by any thread of any rank is visible to every thread of every rank after it.
__device__ __forceinline__ void kb_grid_barrier(const KbBarrier& bar) {
  // >>> EDIT barrier
  // Flat: block b of rank s raises word s * KB_BLOCKS + b of every rank's flags to the epoch, then
  // every block waits until all world * KB_BLOCKS words of its own rank have reached the epoch. A
  // word is written by one block of one rank only, and only grows, so no reset is needed.
  __syncthreads();   // every thread's stores before the releases (cumulative through bar.sync)
  if ((int)threadIdx.x < bar.world)
    kb_st_release(&bar.flags[threadIdx.x][bar.rank * KB_BLOCKS + blockIdx.x], bar.epoch);
  const int words = bar.world * KB_BLOCKS;
  for (int s = threadIdx.x; s < words; s += blockDim.x) kb_wait_geq(&bar.flags[bar.rank][s], bar.epoch);
  __syncthreads();   // every wait done before any thread goes on
  // <<< EDIT barrier
}

// What one call gathers. Gather buffers alternate by epoch parity.
struct KbArgs {
  const float4* x;            // this rank's n floats
  float4* y;                  // [world][n]: row q is rank q's x
  float4* data[KB_MAXW];      // every rank's gather buffer for this epoch ([world][n] floats)
  long long n4;               // n / 4
  KbBarrier bar;
};

__global__ void __launch_bounds__(KB_THREADS) kb_barrier_gather_kernel(KbArgs a) {
  const int rank = a.bar.rank, world = a.bar.world;
  // part 1: this block's elements of x (grid-stride) into row `rank` of every rank's gather buffer
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.n4; i += stride) {
    const float4 v = a.x[i];
    for (int q = 0; q < world; ++q) a.data[q][rank * a.n4 + i] = v;
  }
  kb_grid_barrier(a.bar);
  // part 2: block b copies the b-th contiguous piece of the local gather buffer (all ranks' rows) to y
  const long long total = world * a.n4, per = (total + gridDim.x - 1) / gridDim.x;
  const long long lo = min(total, (long long)blockIdx.x * per), hi = min(total, lo + per);
  for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) a.y[i] = __ldcg(&a.data[rank][i]);
}

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static char kb_error[256];
static KbArgs kb_base;            // pointers of epoch parity 0
static long long kb_data_bytes;   // bytes of one gather buffer (world * largest n floats)
static uint32_t kb_epoch;

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

// Bytes of each rank's IPC buffer: the flag words, then two gather buffers of data_bytes.
extern "C" size_t kb_buffer_bytes(long long data_bytes) { return KB_FLAG_BYTES + 2 * (size_t)data_bytes; }

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
extern "C" int kb_setup(int rank, int world, void* const* bufs, long long data_bytes) {
  if (world < 1 || world > KB_MAXW) {
    snprintf(kb_error, sizeof(kb_error), "world size %d (1..%d)", world, KB_MAXW);
    return -1;
  }
  memset(&kb_base, 0, sizeof(kb_base));
  for (int q = 0; q < world; ++q) {
    kb_base.bar.flags[q] = (uint32_t*)bufs[q];
    kb_base.data[q] = (float4*)((char*)bufs[q] + KB_FLAG_BYTES);
  }
  kb_base.bar.rank = rank;
  kb_base.bar.world = world;
  kb_data_bytes = data_bytes;
  kb_epoch = 0;
  return 0;
}

// y[q] <- rank q's x for every q; n a multiple of 4, the same on every rank.
extern "C" int kb_barrier_gather(const float* x, float* y, long long n, cudaStream_t stream) {
  if (n < 4 || n % 4 != 0 || n * 4LL * kb_base.bar.world > kb_data_bytes) {
    snprintf(kb_error, sizeof(kb_error), "bad n %lld (a multiple of 4, at most %lld)", n,
             kb_data_bytes / (4LL * kb_base.bar.world));
    return -1;
  }
  KbArgs a = kb_base;
  a.bar.epoch = ++kb_epoch;
  for (int q = 0; q < a.bar.world; ++q)
    a.data[q] = (float4*)((char*)a.data[q] + (size_t)kb_data_bytes * (a.bar.epoch & 1));
  a.x = (const float4*)x;
  a.y = (float4*)y;
  a.n4 = n / 4;
  kb_barrier_gather_kernel<<<KB_BLOCKS, KB_THREADS, 0, stream>>>(a);
  KB_CHECK(cudaGetLastError());
  return 0;
}
