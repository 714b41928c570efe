// Peer copy over CUDA IPC (problems/p2p/ipc_peer_copy).
// Rank r sends x to rank (r + 1) % W and receives rank (r - 1 + W) % W's x into y, through receive
// buffers that every rank allocated and mapped into its peers with CUDA IPC (done by the harness).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXB 256                       // most blocks per launch (one flag per block)
#define KB_FLAG_BYTES (2 * KB_MAXB * 4)   // flags at the start of each rank's IPC buffer
#define KB_SPIN_NS 10000000000ull         // a wait longer than 10 s traps: the job fails instead of hanging

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

// What one call moves. Receive buffers alternate by epoch parity; all flags start at 0.
struct KbArgs {
  const uint4* x;            // this rank's input: vecs 16-byte vectors
  uint4* y;                  // this rank's output
  uint4* next_data;          // the next rank's receive buffer for this epoch (peer memory, NVLink)
  const uint4* my_data;      // this rank's receive buffer for this epoch (written by the previous rank)
  uint32_t* next_full;       // the next rank's arrival flags [KB_MAXB]: raise to epoch once your slice is there
  const uint32_t* my_full;   // this rank's arrival flags (raised by the previous rank)
  const uint32_t* my_acked;  // this rank's consumed flags (raised by the next rank when it has copied a slice out)
  uint32_t* prev_acked;      // the previous rank's consumed flags: raise to epoch once you copied your slice out
  long long vecs;            // 16-byte vectors to move (the same on every rank)
  uint32_t epoch;            // 1, 2, 3, ...: the call number, the same on every rank
};

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere). Before writing
// the next rank's buffer of this epoch, that rank must be done with the same buffer two epochs ago.
__global__ void kb_peer_copy_kernel(KbArgs a) {
  // >>> EDIT kernel
  // TODO: send this block's slice of x into a.next_data, signal it, wait for the previous rank's
  // slice in a.my_data, copy it to a.y, acknowledge it.
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
static void* kb_bufs[2];          // [0] this rank's IPC buffer, [1] the next rank's (mapped)
static uint32_t* kb_prev_flags;   // the previous rank's flags (mapped)
static long long kb_data_bytes;   // bytes of one receive buffer
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

// Bytes of each rank's IPC buffer: the flags, then two receive buffers of data_bytes.
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
  kb_bufs[0] = bufs[rank];
  kb_bufs[1] = bufs[(rank + 1) % world];
  kb_prev_flags = (uint32_t*)bufs[(rank - 1 + world) % world];
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

// y <- the previous rank's x, x -> the next rank's y; bytes a multiple of 16, the same on every rank.
extern "C" int kb_peer_copy(const void* x, void* y, long long bytes, cudaStream_t stream) {
  if (bytes % 16 != 0 || bytes > kb_data_bytes) {
    snprintf(kb_error, sizeof(kb_error), "bad size %lld (multiple of 16, at most %lld)", bytes, kb_data_bytes);
    return -1;
  }
  const uint32_t epoch = ++kb_epoch;
  const size_t half = (size_t)kb_data_bytes * (epoch & 1);
  uint32_t* my_flags = (uint32_t*)kb_bufs[0];
  uint32_t* next_flags = (uint32_t*)kb_bufs[1];
  KbArgs a;
  a.x = (const uint4*)x;
  a.y = (uint4*)y;
  a.next_data = (uint4*)((char*)kb_bufs[1] + KB_FLAG_BYTES + half);
  a.my_data = (const uint4*)((const char*)kb_bufs[0] + KB_FLAG_BYTES + half);
  a.next_full = next_flags;                   // flags [0, KB_MAXB): arrivals
  a.my_full = my_flags;
  a.my_acked = my_flags + KB_MAXB;            // flags [KB_MAXB, 2 KB_MAXB): acknowledgements
  a.prev_acked = kb_prev_flags + KB_MAXB;
  a.vecs = bytes / 16;
  a.epoch = epoch;
  kb_peer_copy_kernel<<<kb_blocks, kb_threads, 0, stream>>>(a);
  KB_CHECK(cudaGetLastError());
  return 0;
}
