// GEMM + reduce-scatter over CUDA IPC (problems/fusion/native_gemm_reduce_scatter).
// Every rank multiplies its slice of the contraction dimension (a row-parallel linear layer): its
// partial product of the full [m, n] output is reduce-scattered along the rows, rank q keeping rows
// q*m/W .. (q+1)*m/W - 1 of the sum. Every rank allocated a buffer that the harness mapped into every
// other rank with CUDA IPC: fp32 receive slots (one per source rank) and ready flags.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXW 8                              // most ranks
#define KB_MAXT 4096                           // ready flags per (owner, source) pair: tiles of one owner's rows
#define KB_MAXB 1024                           // most blocks per launch
#define KB_FLAG_BYTES (KB_MAXW * KB_MAXT * 4)  // flags at the start of each rank's IPC buffer
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

// What one call works on. Receive slots alternate by epoch parity; all flags start at 0.
struct KbArgs {
  const __nv_bfloat16* a;     // [m, k] this rank's slice of the input features, for all m rows
  const __nv_bfloat16* b;     // [k, n] this rank's rows of the weight
  __nv_bfloat16* out;         // [m / world, n] out: rows rank*m/world .. of the sum over ranks of a @ b
  float* slots[KB_MAXW];      // every rank's receive slots for this epoch (slots[rank] is local):
                              // slots[q] is fp32 [world (source)][m / world][n]; rank s puts its partial
                              // product of rank q's rows at slots[q] + (s * (m / world)) * n
  uint32_t* flags[KB_MAXW];   // every rank's ready flags [KB_MAXW (source)][KB_MAXT]: flags[q][s * KB_MAXT + t]
                              // is raised to epoch by rank s once its piece t of rank q's rows is in
                              // slots[q] (how rows are cut into pieces is yours, at most KB_MAXT)
  int m, n, k;                // k: this rank's slice (the full contraction is world * k)
  int rank, world;
  uint32_t epoch;             // 1, 2, 3, ...: the call number, the same on every rank
};

// >>> EDIT helpers
// TODO (optional): device helpers for the kernel (e.g. a GEMM tile).
// <<< EDIT helpers

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere, every call).
__global__ void kb_gemm_rs_kernel(KbArgs a) {
  // >>> EDIT kernel
  // TODO: compute this rank's partial product tile by tile, store each tile of rank q's rows into
  // a.slots[q] at this rank's slot, raise its flag in a.flags[q]; then sum the W slots of every
  // tile of this rank's rows (once all of its flags are up) into a.out.
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
static KbArgs kb_base;            // pointers of epoch parity 0
static long long kb_slot_floats;  // floats of one parity's slots (at least m * n of every call)
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

// Bytes of each rank's IPC buffer: the flags, then two parities of fp32 slots (max_mn = the largest m * n).
extern "C" size_t kb_buffer_bytes(long long max_mn) { return KB_FLAG_BYTES + 2 * (size_t)max_mn * 4; }

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
extern "C" int kb_setup(int rank, int world, void* const* bufs, long long max_mn) {
  if (world < 1 || world > KB_MAXW) {
    snprintf(kb_error, sizeof(kb_error), "world size %d (1..%d)", world, KB_MAXW);
    return -1;
  }
  memset(&kb_base, 0, sizeof(kb_base));
  for (int q = 0; q < world; ++q) {
    kb_base.flags[q] = (uint32_t*)bufs[q];
    kb_base.slots[q] = (float*)((char*)bufs[q] + KB_FLAG_BYTES);
  }
  kb_base.rank = rank;
  kb_base.world = world;
  kb_slot_floats = max_mn;
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
    KB_CHECK(cudaFuncSetAttribute(kb_gemm_rs_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kb_smem));
  // blocks wait for tiles other blocks (here and on the peers) produce: all must be resident at once
  int dev = 0, sms = 0, per_sm = 0;
  KB_CHECK(cudaGetDevice(&dev));
  KB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  KB_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kb_gemm_rs_kernel, kb_threads, kb_smem));
  if (kb_blocks > per_sm * sms) {
    snprintf(kb_error, sizeof(kb_error), "%d blocks of %d threads cannot all be resident (%d SMs x %d blocks)",
             kb_blocks, kb_threads, sms, per_sm);
    return -1;
  }
  return 0;
}

// out <- rows rank*m/world .. of the sum over ranks of a @ b (a bfloat16 [m, k], b bfloat16 [k, n],
// out bfloat16 [m / world, n]), on `stream`; m, n, k the same on every rank.
extern "C" int kb_gemm_rs(const void* a, const void* b, void* out, int m, int n, int k, cudaStream_t stream) {
  if (m < 1 || n < 1 || k < 1 || m % (16 * kb_base.world) != 0 || n % 128 != 0 || k % 32 != 0 ||
      (long long)m * n > kb_slot_floats) {
    snprintf(kb_error, sizeof(kb_error), "bad shape m=%d n=%d k=%d (m a multiple of 16 * world, n of 128, k of 32, "
             "m * n at most %lld)", m, n, k, kb_slot_floats);
    return -1;
  }
  KbArgs args = kb_base;
  args.epoch = ++kb_epoch;
  for (int q = 0; q < args.world; ++q) args.slots[q] += (size_t)kb_slot_floats * (args.epoch & 1);
  args.a = (const __nv_bfloat16*)a;
  args.b = (const __nv_bfloat16*)b;
  args.out = (__nv_bfloat16*)out;
  args.m = m;
  args.n = n;
  args.k = k;
  kb_gemm_rs_kernel<<<kb_blocks, kb_threads, kb_smem, stream>>>(args);
  KB_CHECK(cudaGetLastError());
  return 0;
}
