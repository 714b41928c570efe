// MoE combine over CUDA IPC (problems/ep/native_combine_reduce): expert outputs go back from the
// ranks that computed them to the ranks that own the tokens and are summed there with their top-k
// weights, in fp32. Every rank allocated a buffer that the harness mapped into every other rank with
// CUDA IPC: arrival flags, then two parities of fp32 receive slots [source rank][token][hidden] with a
// tag per (source rank, token) saying whether the slot was written in this epoch.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXW 8                                   // most ranks
#define KB_MAXB 256                                 // most blocks per launch
#define KB_FLAG_BYTES (KB_MAXW * KB_MAXB * 4)       // arrival flags at the start of each rank's IPC buffer
#define KB_SPIN_NS 10000000000ull                   // a wait longer than 10 s traps: the job fails instead of hanging

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

// What one call works on. Slots and tags alternate by epoch parity; all flags and tags start at 0.
struct KbArgs {
  const __nv_bfloat16* expert_out;  // [rows, hidden]: row i is an expert output this rank computed
  const float* weights;             // [rows]: its top-k weight
  const int64_t* src_rank;          // [rows]: the rank that owns its token
  const int64_t* src_token;         // [rows]: the token's index there; rows sorted by (src_rank, src_token)
  __nv_bfloat16* out;               // [tokens, hidden] out: this rank's tokens, combined
  float* slots[KB_MAXW];            // every rank's receive slots for this epoch (slots[rank] is local):
                                    // fp32 [world (source)][tokens][hidden]
  uint32_t* tags[KB_MAXW];          // every rank's slot tags for this epoch: [world (source)][tokens]
  uint32_t* flags[KB_MAXW];         // every rank's arrival flags [KB_MAXW (source)][KB_MAXB]:
                                    // flags[q][s * KB_MAXB + b] is raised to epoch by block b of rank s
  int rows, tokens, hidden;
  int rank, world;
  uint32_t epoch;                   // 1, 2, 3, ...: the call number, the same on every rank
};

// >>> EDIT helpers
// TODO (optional): device helpers for the kernel.
// <<< EDIT helpers

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere, every call).
__global__ void kb_combine_kernel(KbArgs a) {
  // >>> EDIT kernel
  // TODO: for each (owner, token) pair of this rank's rows, store the fp32 sum of weight * row into
  // a.slots[owner] (source a.rank, that token) and tag it with the epoch in a.tags[owner]; raise this
  // block's flag at every rank; wait for every block of every source; sum each token's tagged slots
  // into a.out.
  (void)a;
  // <<< EDIT kernel
}

// Blocks (at most KB_MAXB, all resident at once) and threads per block (a multiple of 32), chosen
// once at setup: every call of every size uses this grid.
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
static long long kb_max_elems;    // the largest tokens * hidden
static long long kb_max_tokens;   // the largest tokens
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

// One parity's tags and slots, and each rank's IPC buffer: the flags, two parities of tags, two
// parities of slots (max_tokens: the largest tokens, max_elems: the largest tokens * hidden).
static size_t kb_tag_bytes(int world, long long max_tokens) { return ((size_t)world * max_tokens * 4 + 255) / 256 * 256; }
static size_t kb_slot_bytes(int world, long long max_elems) { return (size_t)world * max_elems * 4; }
extern "C" size_t kb_buffer_bytes(int world, long long max_tokens, long long max_elems) {
  return KB_FLAG_BYTES + 2 * kb_tag_bytes(world, max_tokens) + 2 * kb_slot_bytes(world, max_elems);
}

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
extern "C" int kb_setup(int rank, int world, void* const* bufs, long long max_tokens, long long max_elems) {
  if (world < 1 || world > KB_MAXW) {
    snprintf(kb_error, sizeof(kb_error), "world size %d (1..%d)", world, KB_MAXW);
    return -1;
  }
  memset(&kb_base, 0, sizeof(kb_base));
  for (int q = 0; q < world; ++q) {
    char* base = (char*)bufs[q];
    kb_base.flags[q] = (uint32_t*)base;
    kb_base.tags[q] = (uint32_t*)(base + KB_FLAG_BYTES);
    kb_base.slots[q] = (float*)(base + KB_FLAG_BYTES + 2 * kb_tag_bytes(world, max_tokens));
  }
  kb_base.rank = rank;
  kb_base.world = world;
  kb_max_tokens = max_tokens;
  kb_max_elems = max_elems;
  kb_epoch = 0;
  kb_blocks = 1;
  kb_threads = 32;
  kb_launch_shape(&kb_blocks, &kb_threads);
  if (kb_blocks < 1 || kb_blocks > KB_MAXB || kb_threads < 32 || kb_threads > 1024 || kb_threads % 32 != 0) {
    snprintf(kb_error, sizeof(kb_error), "kb_launch_shape chose %d blocks of %d threads (1..%d, 32..1024 by 32)",
             kb_blocks, kb_threads, KB_MAXB);
    return -1;
  }
  // every block waits for the blocks of every rank: all of them must be resident at once
  int dev = 0, sms = 0, per_sm = 0;
  KB_CHECK(cudaGetDevice(&dev));
  KB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  KB_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kb_combine_kernel, kb_threads, 0));
  if (kb_blocks > per_sm * sms) {
    snprintf(kb_error, sizeof(kb_error), "%d blocks of %d threads cannot all be resident (%d SMs x %d blocks)",
             kb_blocks, kb_threads, sms, per_sm);
    return -1;
  }
  return 0;
}

// Combine `rows` expert outputs (bfloat16 [rows, hidden], hidden a multiple of 128) into this
// rank's `tokens` tokens (out bfloat16 [tokens, hidden]), on `stream`; tokens and hidden the same on
// every rank.
extern "C" int kb_combine(const void* expert_out, const float* weights, const int64_t* src_rank,
                          const int64_t* src_token, void* out, int rows, int tokens, int hidden, cudaStream_t stream) {
  if (rows < 0 || tokens < 1 || hidden < 128 || hidden % 128 != 0 || tokens > kb_max_tokens ||
      (long long)tokens * hidden > kb_max_elems) {
    snprintf(kb_error, sizeof(kb_error), "bad shape: rows=%d tokens=%d hidden=%d (hidden a multiple of 128, tokens at "
             "most %lld, tokens * hidden at most %lld)", rows, tokens, hidden, kb_max_tokens, kb_max_elems);
    return -1;
  }
  KbArgs a = kb_base;
  a.epoch = ++kb_epoch;
  const int parity = a.epoch & 1;
  for (int q = 0; q < a.world; ++q) {
    a.tags[q] = (uint32_t*)((char*)a.tags[q] + kb_tag_bytes(a.world, kb_max_tokens) * parity);
    a.slots[q] = (float*)((char*)a.slots[q] + kb_slot_bytes(a.world, kb_max_elems) * parity);
  }
  a.expert_out = (const __nv_bfloat16*)expert_out;
  a.weights = weights;
  a.src_rank = src_rank;
  a.src_token = src_token;
  a.out = (__nv_bfloat16*)out;
  a.rows = rows;
  a.tokens = tokens;
  a.hidden = hidden;
  kb_combine_kernel<<<kb_blocks, kb_threads, 0, stream>>>(a);
  KB_CHECK(cudaGetLastError());
  return 0;
}
