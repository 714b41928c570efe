// Broadcast by peer reads over CUDA IPC (problems/collective/ipc_broadcast_pull).
// Every rank allocated a buffer that the harness mapped into every other rank with CUDA IPC. A call
// stages the root's x in the root's buffer and raises a per-block ready flag in every other rank;
// each of them pulls the root's staged x over NVLink into y and tells the root it is done.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXW 8                                          // most ranks
#define KB_MAXB 256                                        // most blocks per launch
#define KB_READY_WORDS KB_MAXB                             // ready[b], on every rank (written by the root)
#define KB_DONE_WORDS (KB_MAXB * KB_MAXW)                  // done[b * KB_MAXW + r], on the root (written by rank r)
#define KB_FLAG_BYTES ((KB_READY_WORDS + KB_DONE_WORDS) * 4)   // flags at the start of each rank's IPC buffer
#define KB_SPIN_NS 10000000000ull                          // a wait longer than 10 s traps: the job fails instead of hanging

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

// What one call moves. Staging buffers alternate by epoch parity; all flags start at 0.
struct KbArgs {
  const uint4* x;              // this rank's input (only the root's matters): vecs 16-byte vectors
  uint4* y;                    // this rank's output: the root's x
  uint4* stage;                // this rank's staging buffer for this epoch (the root stages x here)
  const uint4* root_stage;     // the root's staging buffer for this epoch (peer memory off the root)
  uint32_t* ready[KB_MAXW];    // every rank's ready flags [KB_MAXB]: ready[q][b] is raised to epoch
                               // by the root once its block b has staged its slice of this epoch
  const uint32_t* my_ready;    // ready[rank]
  uint32_t* root_done;         // the root's done flags [KB_MAXB * KB_MAXW]: root_done[b * KB_MAXW + r]
                               // is raised to epoch by rank r once its block b has copied its slice out
  long long vecs;              // 16-byte vectors (the same on every rank)
  int rank, world, root;
  uint32_t epoch;              // 1, 2, 3, ...: the call number, the same on every rank
};

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere, every call).
// The root writes a staging buffer of this parity again two epochs later: only once every rank
// has copied out what it staged there then.
__global__ void kb_broadcast_kernel(KbArgs a) {
  // >>> EDIT kernel
  // TODO: on the root, stage this block's slice of x (once every rank is done with the buffer's
  // previous use), copy it to y, raise the block's ready flag in every rank; on the other ranks,
  // wait for the ready flag, copy the root's staged slice into y, raise the block's done flag.
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
static long long kb_data_bytes;   // bytes of one staging buffer (the largest x)
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
extern "C" int kb_setup(int rank, int world, int root, void* const* bufs, long long data_bytes) {
  if (world < 1 || world > KB_MAXW || root < 0 || root >= world) {
    snprintf(kb_error, sizeof(kb_error), "world size %d (1..%d), root %d", world, KB_MAXW, root);
    return -1;
  }
  memset(&kb_base, 0, sizeof(kb_base));
  for (int q = 0; q < world; ++q) kb_base.ready[q] = (uint32_t*)bufs[q];
  kb_base.my_ready = kb_base.ready[rank];
  kb_base.root_done = (uint32_t*)bufs[root] + KB_READY_WORDS;
  kb_base.stage = (uint4*)((char*)bufs[rank] + KB_FLAG_BYTES);
  kb_base.root_stage = (const uint4*)((char*)bufs[root] + KB_FLAG_BYTES);
  kb_base.rank = rank;
  kb_base.world = world;
  kb_base.root = root;
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

// y <- the root's x on every rank; bytes a multiple of 16, the same on every rank.
extern "C" int kb_broadcast(const void* x, void* y, long long bytes, cudaStream_t stream) {
  if (bytes % 16 != 0 || bytes > kb_data_bytes) {
    snprintf(kb_error, sizeof(kb_error), "bad size %lld (multiple of 16, at most %lld)", bytes, kb_data_bytes);
    return -1;
  }
  KbArgs a = kb_base;
  a.epoch = ++kb_epoch;
  const size_t half = (size_t)kb_data_bytes * (a.epoch & 1);
  a.stage = (uint4*)((char*)a.stage + half);
  a.root_stage = (const uint4*)((const char*)a.root_stage + half);
  a.x = (const uint4*)x;
  a.y = (uint4*)y;
  a.vecs = bytes / 16;
  kb_broadcast_kernel<<<kb_blocks, kb_threads, 0, stream>>>(a);
  KB_CHECK(cudaGetLastError());
  return 0;
}
