// Pipeline-stage activation send over CUDA IPC (problems/p2p/pp_stage_send_ipc).
// Stage r sends its activations x to stage r + 1 (the last stage sends nothing) and receives stage
// r - 1's into y (the first stage receives nothing), through staging buffers in IPC memory that
// every rank allocated and the harness mapped into its neighbours.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_BLOCKS 64                        // blocks per launch (fixed): block b owns slice b everywhere
#define KB_THREADS 512
#define KB_FLAG_BYTES (2 * KB_BLOCKS * 4)   // ready[KB_BLOCKS], done[KB_BLOCKS] at the start of each buffer
#define KB_SPIN_NS 10000000000ull           // a wait longer than 10 s traps: the job fails instead of hanging

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
  const uint4* x;              // this stage's activations: vecs 16-byte vectors
  uint4* y;                    // the previous stage's activations land here (null on the first stage)
  uint4* my_stage;             // this rank's staging buffer for this epoch (the next stage reads it)
  const uint4* prev_stage;     // the previous stage's staging buffer for this epoch (peer memory, NVLink)
  uint32_t* next_ready;        // the next stage's ready words [KB_BLOCKS] (peer memory)
  const uint32_t* my_ready;    // this rank's ready words, raised by the previous stage
  const uint32_t* my_done;     // this rank's done words [KB_BLOCKS], raised by the next stage
  uint32_t* prev_done;         // the previous stage's done words (peer memory)
  long long vecs;              // 16-byte vectors in x (the same on every rank)
  int has_next, has_prev;      // 0 on the last / first stage
  uint32_t epoch;              // 1, 2, 3, ...: the call number, the same on every rank
};

__global__ void __launch_bounds__(KB_THREADS) kb_stage_kernel(KbArgs a) {
  const int b = blockIdx.x;
  const long long per = (a.vecs + gridDim.x - 1) / gridDim.x;
  const long long lo = min(a.vecs, (long long)b * per), hi = min(a.vecs, lo + per);
  if (a.has_next) {
    // >>> EDIT send
    // TODO: make this block's slice [lo, hi) of x available to the next stage and tell it.
    // <<< EDIT send
  }
  if (a.has_prev) {
    // >>> EDIT receive
    // TODO: wait for the previous stage's slice [lo, hi), copy it into a.y, hand the buffer back.
    // <<< EDIT receive
  }
}

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static char kb_error[256];
static KbArgs kb_base;            // pointers of epoch parity 0
static long long kb_data_bytes;   // bytes of one staging buffer
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
  memset(&kb_base, 0, sizeof(kb_base));
  uint32_t* mine = (uint32_t*)bufs[rank];
  kb_base.my_stage = (uint4*)((char*)bufs[rank] + KB_FLAG_BYTES);
  kb_base.my_ready = mine;                            // words [0, KB_BLOCKS): ready
  kb_base.my_done = mine + KB_BLOCKS;                 // words [KB_BLOCKS, 2 KB_BLOCKS): done
  kb_base.has_next = rank + 1 < world;
  kb_base.has_prev = rank > 0;
  if (kb_base.has_next) kb_base.next_ready = (uint32_t*)bufs[rank + 1];
  if (kb_base.has_prev) {
    kb_base.prev_stage = (const uint4*)((const char*)bufs[rank - 1] + KB_FLAG_BYTES);
    kb_base.prev_done = (uint32_t*)bufs[rank - 1] + KB_BLOCKS;
  }
  kb_data_bytes = data_bytes;
  kb_epoch = 0;
  return 0;
}

// y <- the previous stage's x, x -> the next stage; bytes a multiple of 16, the same on every rank.
extern "C" int kb_stage_send(const void* x, void* y, long long bytes, cudaStream_t stream) {
  if (bytes % 16 != 0 || bytes > kb_data_bytes || (kb_base.has_prev && y == nullptr)) {
    snprintf(kb_error, sizeof(kb_error), "bad call: %lld bytes (multiple of 16, at most %lld), y %p", bytes,
             kb_data_bytes, y);
    return -1;
  }
  KbArgs a = kb_base;
  a.epoch = ++kb_epoch;
  const size_t half = (size_t)kb_data_bytes * (a.epoch & 1);
  a.my_stage = (uint4*)((char*)a.my_stage + half);
  if (a.has_prev) a.prev_stage = (const uint4*)((const char*)a.prev_stage + half);
  a.x = (const uint4*)x;
  a.y = (uint4*)y;
  a.vecs = bytes / 16;
  kb_stage_kernel<<<KB_BLOCKS, KB_THREADS, 0, stream>>>(a);
  KB_CHECK(cudaGetLastError());
  return 0;
}
