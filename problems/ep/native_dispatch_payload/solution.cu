// MoE dispatch payload over CUDA IPC (problems/ep/native_dispatch_payload): every token's hidden
// vector goes to each rank that hosts one of its top-k experts, into that rank's receive block for
// this source rank, at the row the layout gave it; arrival flags tell the receiver when a source is
// done. Every rank allocated a buffer that the harness mapped into every other rank with CUDA IPC.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXW 8                                   // most ranks
#define KB_MAXB 256                                 // most blocks per launch
#define KB_FLAG_BYTES (KB_MAXW * KB_MAXB * 4)       // arrival flags at the start of each rank's IPC buffer
#define KB_COUNT_BYTES 256                          // then two parities of received counts (KB_MAXW ints each)
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

// What one call moves; rows are hidden / 8 vectors of 8 bfloat16 (uint4). Receive blocks and counts
// alternate by epoch parity; all flags start at 0.
struct KbArgs {
  const uint4* x;                   // [tokens, hidden] this rank's tokens
  const bool* is_token_in_rank;     // [tokens, world]: token t goes to rank r
  const int* token_slot;            // [tokens, world]: its row in rank r's block for this rank (-1: not sent)
  const int* num_tokens_per_rank;   // [world]: how many tokens go to rank r
  uint4* recv_x;                    // [world, tokens, hidden] out: block s holds rank s's tokens sent here,
                                    // rows 0 .. recv_counts[s] - 1 (the rest is not looked at)
  int* recv_counts;                 // [world] out: tokens received from each rank
  uint4* rbuf[KB_MAXW];             // every rank's receive blocks for this epoch (rbuf[rank] is local):
                                    // [world (source)][tokens][hidden], laid out as recv_x
  int* rcount[KB_MAXW];             // every rank's received counts for this epoch: [KB_MAXW (source)]
  uint32_t* flags[KB_MAXW];         // every rank's arrival flags [KB_MAXW (source)][KB_MAXB]:
                                    // flags[q][s * KB_MAXB + b] is raised to epoch by block b of rank s
  int tokens, hidden;
  int rank, world;
  uint32_t epoch;                   // 1, 2, 3, ...: the call number, the same on every rank
};

// >>> EDIT helpers
// <<< EDIT helpers

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere, every call).
__global__ void kb_dispatch_kernel(KbArgs a) {
  // >>> EDIT kernel
  // Block b sends a contiguous range of this rank's tokens (a warp per token: each vector is read
  // once and stored to every destination), block 0 also the counts; then each block raises its
  // flag at every rank, waits for every block of every source, and copies a share of the received
  // rows out. Reuse is safe: rank s writes this parity of rank q's blocks again two epochs later,
  // after waiting (in the epoch in between) for flags rank q raises only once its kernel of this
  // epoch (the copy-out) is done.
  const int W = a.world, T = a.tokens, hv = a.hidden / 8;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  const int per = (T + gridDim.x - 1) / gridDim.x;
  const int t0 = min(T, (int)blockIdx.x * per), t1 = min(T, t0 + per);
  for (int t = t0 + warp; t < t1; t += nwarps) {
    uint4* dst[KB_MAXW];
#pragma unroll
    for (int r = 0; r < KB_MAXW; ++r) {
      dst[r] = nullptr;
      if (r < W && a.is_token_in_rank[(size_t)t * W + r])
        dst[r] = a.rbuf[r] + ((size_t)a.rank * T + a.token_slot[(size_t)t * W + r]) * hv;
    }
    const uint4* src = a.x + (size_t)t * hv;
    for (int v = lane; v < hv; v += 32) {
      const uint4 val = src[v];
#pragma unroll
      for (int r = 0; r < KB_MAXW; ++r)
        if (dst[r] != nullptr) dst[r][v] = val;
    }
  }
  if (blockIdx.x == 0 && threadIdx.x < W) a.rcount[threadIdx.x][a.rank] = a.num_tokens_per_rank[threadIdx.x];
  __syncthreads();   // this block's rows (and block 0's counts) are stored before its flags go up
  if (threadIdx.x < W) {
    __threadfence_system();
    kb_st_release(&a.flags[threadIdx.x][a.rank * KB_MAXB + blockIdx.x], a.epoch);
  }
  for (int i = threadIdx.x; i < W * (int)gridDim.x; i += blockDim.x)
    kb_wait_geq(&a.flags[a.rank][(i / gridDim.x) * KB_MAXB + i % gridDim.x], a.epoch);
  __syncthreads();   // every source is done
  const int* counts = a.rcount[a.rank];
  if (blockIdx.x == 0 && threadIdx.x < W) a.recv_counts[threadIdx.x] = counts[threadIdx.x];
  const uint4* in = a.rbuf[a.rank];
  for (int s = 0; s < W; ++s) {
    const size_t base = (size_t)s * T * hv, total = (size_t)counts[s] * hv;
    for (size_t v = (size_t)blockIdx.x * blockDim.x + threadIdx.x; v < total; v += (size_t)gridDim.x * blockDim.x)
      a.recv_x[base + v] = in[base + v];
  }
  // <<< EDIT kernel
}

// Blocks (at most KB_MAXB, all resident at once) and threads per block (a multiple of 32), chosen
// once at setup: every call of every size uses this grid.
static void kb_launch_shape(int* blocks, int* threads) {
  // >>> EDIT launch
  // one block per SM, all resident (a block waits for every block of every rank)
  int dev = 0, sms = 132;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  *blocks = sms < KB_MAXB ? sms : KB_MAXB;
  *threads = 512;
  // <<< EDIT launch
}

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static char kb_error[256];
static KbArgs kb_base;            // pointers of epoch parity 0
static long long kb_max_elems;    // the largest tokens * hidden
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

// Bytes of one parity's receive blocks, and of each rank's IPC buffer: the flags, two parities of
// counts, two parities of receive blocks (max_elems: the largest tokens * hidden).
static size_t kb_block_bytes(int world, long long max_elems) { return (size_t)world * max_elems * 2; }
extern "C" size_t kb_buffer_bytes(int world, long long max_elems) {
  return KB_FLAG_BYTES + 2 * KB_COUNT_BYTES + 2 * kb_block_bytes(world, max_elems);
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
extern "C" int kb_setup(int rank, int world, void* const* bufs, long long max_elems) {
  if (world < 1 || world > KB_MAXW) {
    snprintf(kb_error, sizeof(kb_error), "world size %d (1..%d)", world, KB_MAXW);
    return -1;
  }
  memset(&kb_base, 0, sizeof(kb_base));
  for (int q = 0; q < world; ++q) {
    kb_base.flags[q] = (uint32_t*)bufs[q];
    kb_base.rcount[q] = (int*)((char*)bufs[q] + KB_FLAG_BYTES);
    kb_base.rbuf[q] = (uint4*)((char*)bufs[q] + KB_FLAG_BYTES + 2 * KB_COUNT_BYTES);
  }
  kb_base.rank = rank;
  kb_base.world = world;
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
  KB_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kb_dispatch_kernel, kb_threads, 0));
  if (kb_blocks > per_sm * sms) {
    snprintf(kb_error, sizeof(kb_error), "%d blocks of %d threads cannot all be resident (%d SMs x %d blocks)",
             kb_blocks, kb_threads, sms, per_sm);
    return -1;
  }
  return 0;
}

// Dispatch this rank's tokens (bfloat16 [tokens, hidden], hidden a multiple of 8) by the layout; on
// `stream`, tokens and hidden the same on every rank.
extern "C" int kb_dispatch(const void* x, const bool* is_token_in_rank, const int* token_slot,
                           const int* num_tokens_per_rank, void* recv_x, int* recv_counts, int tokens, int hidden,
                           cudaStream_t stream) {
  if (tokens < 1 || hidden < 8 || hidden % 8 != 0 || (long long)tokens * hidden > kb_max_elems) {
    snprintf(kb_error, sizeof(kb_error), "bad shape [%d, %d] (hidden a multiple of 8, tokens * hidden at most %lld)",
             tokens, hidden, kb_max_elems);
    return -1;
  }
  KbArgs a = kb_base;
  a.epoch = ++kb_epoch;
  const int parity = a.epoch & 1;
  for (int q = 0; q < a.world; ++q) {
    a.rcount[q] = (int*)((char*)a.rcount[q] + KB_COUNT_BYTES * parity);
    a.rbuf[q] = (uint4*)((char*)a.rbuf[q] + kb_block_bytes(a.world, kb_max_elems) * parity);
  }
  a.x = (const uint4*)x;
  a.is_token_in_rank = is_token_in_rank;
  a.token_slot = token_slot;
  a.num_tokens_per_rank = num_tokens_per_rank;
  a.recv_x = (uint4*)recv_x;
  a.recv_counts = recv_counts;
  a.tokens = tokens;
  a.hidden = hidden;
  kb_dispatch_kernel<<<kb_blocks, kb_threads, 0, stream>>>(a);
  KB_CHECK(cudaGetLastError());
  return 0;
}
