// All-reduce over CUDA IPC, from scratch, any algorithm (problems/collective/ipc_one_shot_allreduce_hard).
// Every rank allocated a buffer that the harness mapped into every other rank with CUDA IPC. What
// lives in it, how the ranks meet, the kernel and its launch are yours.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXW 8                      // most ranks
#define KB_SCRATCH_BYTES (1 << 20)     // zeroed bytes at the start of each rank's IPC buffer (for flags)
#define KB_SPIN_NS 10000000000ull      // every wait must give up (trap) after this long: a deadlock fails, never hangs

// Nanoseconds from the GPU's global timer (for bounding waits).
__device__ __forceinline__ unsigned long long kb_now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Every rank's IPC buffer, as mapped in this process: buf[q] is rank q's (buf[rank] is this rank's
// own), each KB_SCRATCH_BYTES of zeroed scratch followed by 2 * data_bytes of space, 256-byte aligned.
struct KbPeers {
  char* buf[KB_MAXW];
  int rank, world;
  long long data_bytes;        // the largest x in bytes that any call passes
};

// >>> EDIT device
// TODO: device helpers and the kernel(s).
// <<< EDIT device

// Enqueue on `stream` the all-reduce of this call: y <- sum over ranks of x (bytes of bfloat16, a
// multiple of 8192, the same on every rank). `epoch` is the call number (1, 2, 3, ...), the same
// on every rank; every rank makes every call. Return cudaSuccess or the error to report.
static cudaError_t kb_launch(const KbPeers& p, const void* x, void* y, long long bytes, uint32_t epoch,
                             cudaStream_t stream) {
  // >>> EDIT launch
  // TODO: launch the kernel(s).
  (void)p; (void)x; (void)y; (void)bytes; (void)epoch; (void)stream;
  return cudaSuccess;
  // <<< EDIT launch
}

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static char kb_error[256];
static KbPeers kb_peers;
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

// Bytes of each rank's IPC buffer: the scratch, then 2 * data_bytes.
extern "C" size_t kb_buffer_bytes(long long data_bytes) { return KB_SCRATCH_BYTES + 2 * (size_t)data_bytes; }

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
  memset(&kb_peers, 0, sizeof(kb_peers));
  for (int q = 0; q < world; ++q) kb_peers.buf[q] = (char*)bufs[q];
  kb_peers.rank = rank;
  kb_peers.world = world;
  kb_peers.data_bytes = data_bytes;
  kb_epoch = 0;
  return 0;
}

// y <- sum over ranks of x (bfloat16); bytes a multiple of 8192, the same on every rank.
extern "C" int kb_all_reduce(const void* x, void* y, long long bytes, cudaStream_t stream) {
  if (bytes <= 0 || bytes % 8192 != 0 || bytes > kb_peers.data_bytes) {
    snprintf(kb_error, sizeof(kb_error), "bad size %lld (a multiple of 8192, at most %lld)", bytes,
             kb_peers.data_bytes);
    return -1;
  }
  KB_CHECK(kb_launch(kb_peers, x, y, bytes, ++kb_epoch, stream));
  KB_CHECK(cudaGetLastError());
  return 0;
}
