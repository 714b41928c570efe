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
// TODO (optional): device helpers for the kernel (e.g. a GEMM tile).
// <<< EDIT helpers

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere, every call).
__global__ void kb_ag_gemm_kernel(KbArgs a) {
  // >>> EDIT kernel
  // TODO: store this rank's chunks of rows of a into every peer's a.gather[q] (rows a.rank * a.m ..),
  // raise each chunk's flag in a.flags[q]; compute the output tiles of a.c, each after the flag of
  // the chunk it reads (this rank's own rows can be read from a.a directly).
  (void)a;
  // <<< EDIT kernel
}

// Blocks (at most KB_MAXB, all resident at once), threads per block (a multiple of 32) and dynamic
// shared memory bytes per block, chosen once at setup for every call of every size.
static void kb_launch_shape(int* blocks, int* threads, int* smem_bytes) {
  // >>> EDIT launch
  // TODO: choose the grid.
  *blocks = 1;
  *threads = 32;
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
