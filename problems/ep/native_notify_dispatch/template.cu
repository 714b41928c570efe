// MoE notify-dispatch over CUDA IPC (problems/ep/native_notify_dispatch): the count exchange that
// precedes an expert-parallel dispatch. Every rank tells every peer how many tokens it will send it
// (per destination rank and per expert of that peer); then every rank knows where each source's
// tokens land in its receive buffers. Every rank allocated a buffer that the harness mapped into
// every other rank with CUDA IPC: flags, then two parities of message slots.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXW 8                                       // most ranks
#define KB_MAXE 1024                                    // most experts
#define KB_MSG (KB_MAXW + KB_MAXE)                      // ints of one message slot
#define KB_FLAGS 1024                                   // flag words at the start of each rank's IPC buffer
#define KB_FLAG_BYTES (KB_FLAGS * 4)
#define KB_SLOT_BYTES (KB_MAXW * KB_MSG * 4)            // one parity's message slots: [source][KB_MSG] ints
#define KB_SPIN_NS 10000000000ull                       // a wait longer than 10 s traps: the job fails instead of hanging

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

// What one call works on. `local` = experts / world experts live on each rank: expert e on rank
// e / local. Message slots alternate by epoch parity; all flags start at 0.
struct KbArgs {
  const int* num_tokens_per_rank;    // [world] this rank's tokens bound for each rank
  const int* num_tokens_per_expert;  // [experts] this rank's tokens that chose each expert
  int* rank_prefix;                  // [world, world] out: [i][j] = sum over ranks q <= i of q's num_tokens_per_rank[j]
  int* recv_counts;                  // [world, local] out: [s][j] = rank s's num_tokens_per_expert[rank * local + j]
  int* recv_offsets;                 // [world, local] out: where rank s's tokens for local expert j start in
                                     // this rank's expert-major receive buffer (see kb_notify_dispatch)
  int* recv_tokens_per_expert;       // [local] out: [j] = sum over s of recv_counts[s][j]
  int* msg[KB_MAXW];                 // every rank's message slots for this epoch (msg[rank] is local):
                                     // [KB_MAXW (source)][KB_MSG] ints
  uint32_t* flags[KB_MAXW];          // every rank's KB_FLAGS flag words (msg[q] and flags[q] are rank q's)
  int experts, local;
  int rank, world;
  uint32_t epoch;                    // 1, 2, 3, ...: the call number, the same on every rank
};

// >>> EDIT helpers
// TODO (optional): device helpers for the kernel.
// <<< EDIT helpers

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere, every call).
__global__ void kb_notify_kernel(KbArgs a) {
  // >>> EDIT kernel
  // TODO: write this rank's message into every rank's slot for it (a.msg[q] + a.rank * KB_MSG) and
  // raise a flag there; wait for every rank's message in a.msg[a.rank]; compute the four outputs.
  (void)a;
  // <<< EDIT kernel
}

// Blocks and threads per block (a multiple of 32), chosen once at setup for every call.
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

// Bytes of each rank's IPC buffer: the flags, then two parities of message slots.
extern "C" size_t kb_buffer_bytes() { return KB_FLAG_BYTES + 2 * (size_t)KB_SLOT_BYTES; }

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
extern "C" int kb_setup(int rank, int world, void* const* bufs) {
  if (world < 1 || world > KB_MAXW) {
    snprintf(kb_error, sizeof(kb_error), "world size %d (1..%d)", world, KB_MAXW);
    return -1;
  }
  memset(&kb_base, 0, sizeof(kb_base));
  for (int q = 0; q < world; ++q) {
    kb_base.flags[q] = (uint32_t*)bufs[q];
    kb_base.msg[q] = (int*)((char*)bufs[q] + KB_FLAG_BYTES);
  }
  kb_base.rank = rank;
  kb_base.world = world;
  kb_epoch = 0;
  kb_blocks = 1;
  kb_threads = 32;
  kb_launch_shape(&kb_blocks, &kb_threads);
  int dev = 0, sms = 0, per_sm = 0;
  KB_CHECK(cudaGetDevice(&dev));
  KB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  KB_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kb_notify_kernel, kb_threads, 0));
  if (kb_blocks < 1 || kb_threads < 32 || kb_threads > 1024 || kb_threads % 32 != 0 || kb_blocks > per_sm * sms) {
    snprintf(kb_error, sizeof(kb_error), "kb_launch_shape chose %d blocks of %d threads (32..1024 by 32, all "
             "resident at once: at most %d x %d)", kb_blocks, kb_threads, sms, per_sm);
    return -1;
  }
  return 0;
}

// The count exchange of one dispatch, on `stream`; experts (a multiple of world, at most KB_MAXE)
// the same on every rank. This rank's receive buffer is expert-major: local expert 0's tokens
// (from rank 0, then rank 1, ...), then local expert 1's, ...; recv_offsets[s][j] is where rank s's
// block of local expert j starts in it.
extern "C" int kb_notify_dispatch(const int* num_tokens_per_rank, const int* num_tokens_per_expert, int* rank_prefix,
                                  int* recv_counts, int* recv_offsets, int* recv_tokens_per_expert, int experts,
                                  cudaStream_t stream) {
  if (experts < kb_base.world || experts > KB_MAXE || experts % kb_base.world != 0) {
    snprintf(kb_error, sizeof(kb_error), "bad experts %d (a multiple of the world size %d, at most %d)", experts,
             kb_base.world, KB_MAXE);
    return -1;
  }
  KbArgs a = kb_base;
  a.epoch = ++kb_epoch;
  for (int q = 0; q < a.world; ++q) a.msg[q] = (int*)((char*)a.msg[q] + (size_t)KB_SLOT_BYTES * (a.epoch & 1));
  a.num_tokens_per_rank = num_tokens_per_rank;
  a.num_tokens_per_expert = num_tokens_per_expert;
  a.rank_prefix = rank_prefix;
  a.recv_counts = recv_counts;
  a.recv_offsets = recv_offsets;
  a.recv_tokens_per_expert = recv_tokens_per_expert;
  a.experts = experts;
  a.local = experts / a.world;
  kb_notify_kernel<<<kb_blocks, kb_threads, 0, stream>>>(a);
  KB_CHECK(cudaGetLastError());
  return 0;
}
