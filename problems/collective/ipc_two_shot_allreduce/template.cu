// Two-shot all-reduce over CUDA IPC (problems/collective/ipc_two_shot_allreduce).
// Every rank allocated a buffer that the harness mapped into every other rank with CUDA IPC. A call
// runs a reduce-scatter (rank r sums chunk r of every rank's staged x) and then an all-gather (every
// rank collects every reduced chunk), meeting the other ranks at per-block flag barriers in between.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXW 8                                 // most ranks
#define KB_MAXB 256                               // most blocks per launch
#define KB_PHASES 2                               // flag sets: 0 = staged, 1 = reduced
#define KB_FLAG_BYTES (KB_PHASES * KB_MAXB * KB_MAXW * 4)   // flags at the start of each rank's IPC buffer
#define KB_SPIN_NS 10000000000ull                 // a wait longer than 10 s traps: the job fails instead of hanging

// Index of the flag that rank `r` raises for block `b` in phase `phase`, in the flags of any rank.
#define KB_FLAG(phase, b, r) (((phase) * KB_MAXB + (b)) * KB_MAXW + (r))

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

// What one call works on. Staging buffers alternate by epoch parity; all flags start at 0.
// x is viewed as `world` chunks of vecs / world vectors; chunk c is reduced by rank c.
struct KbArgs {
  const uint4* x;              // this rank's input: vecs vectors of 8 bfloat16
  uint4* y;                    // this rank's output (the sum over ranks, all chunks)
  uint4* data[KB_MAXW];        // every rank's staging buffer for this epoch (data[rank] is local), vecs long
  uint32_t* flags[KB_MAXW];    // every rank's flags; flags[q][KB_FLAG(p, b, r)] is written by rank r only
  long long vecs;              // 16-byte vectors (the same on every rank, a multiple of 64 * world)
  int rank, world;
  uint32_t epoch;              // 1, 2, 3, ...: the call number, the same on every rank
};

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere, every call).
__global__ void kb_all_reduce_kernel(KbArgs a) {
  // >>> EDIT kernel
  // TODO: stage x, meet every rank, reduce this rank's chunk (fp32, rank order) and publish it,
  // meet every rank again, gather the other ranks' reduced chunks into a.y.
  (void)a;
  // <<< EDIT kernel
}

// Blocks (at most KB_MAXB) and threads per block, chosen once at setup: every call of every size
// uses this grid, so block b's flags always pair with block b of the other ranks.
static void kb_launch_shape(int* blocks, int* threads) {
  // >>> EDIT launch
  // TODO: choose the grid.
  *blocks = 1;
  *threads = 32;
  // <<< EDIT launch
}

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static char kb_error[256];
static KbArgs kb_base;            // pointers of epoch parity 0
static long long kb_data_bytes;   // bytes of one staging buffer
static uint32_t kb_epoch;
static int kb_blocks, kb_threads;

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

// Bytes of each rank's IPC buffer: the flags, then two staging buffers of data_bytes.
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
    kb_base.flags[q] = (uint32_t*)bufs[q];
    kb_base.data[q] = (uint4*)((char*)bufs[q] + KB_FLAG_BYTES);
  }
  kb_base.rank = rank;
  kb_base.world = world;
  kb_data_bytes = data_bytes;
  kb_epoch = 0;
  kb_blocks = 1;
  kb_threads = 32;
  kb_launch_shape(&kb_blocks, &kb_threads);
  if (kb_blocks < 1 || kb_blocks > KB_MAXB || kb_threads < 1 || kb_threads > 1024) {
    snprintf(kb_error, sizeof(kb_error), "kb_launch_shape chose %d blocks of %d threads (1..%d, 1..1024)",
             kb_blocks, kb_threads, KB_MAXB);
    return -1;
  }
  return 0;
}

// y <- sum over ranks of x (bfloat16); bytes a multiple of 1024 * world, the same on every rank.
extern "C" int kb_all_reduce(const void* x, void* y, long long bytes, cudaStream_t stream) {
  if (bytes % (1024LL * kb_base.world) != 0 || bytes > kb_data_bytes) {
    snprintf(kb_error, sizeof(kb_error), "bad size %lld (multiple of %lld, at most %lld)", bytes,
             1024LL * kb_base.world, kb_data_bytes);
    return -1;
  }
  KbArgs a = kb_base;
  a.epoch = ++kb_epoch;
  for (int q = 0; q < a.world; ++q) a.data[q] = (uint4*)((char*)a.data[q] + (size_t)kb_data_bytes * (a.epoch & 1));
  a.x = (const uint4*)x;
  a.y = (uint4*)y;
  a.vecs = bytes / 16;
  kb_all_reduce_kernel<<<kb_blocks, kb_threads, 0, stream>>>(a);
  KB_CHECK(cudaGetLastError());
  return 0;
}
