// Dropless MoE dispatch with receiver-side row reservation over CUDA IPC
// (problems/ep/dropless_dispatch_atomics): no counts are exchanged. A sender reserves rows in the
// receiver's buffer with a system-scope atomic add on the receiver's row counter, stores its token
// rows (and their token ids) there, then bumps the receiver's completion count. A receiver that has
// seen the completion of every sender block of this call copies the rows out, in whatever order
// they were reserved. Every rank allocated a buffer that the harness mapped into every other rank.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXW 8                                   // most ranks
#define KB_MAXB 256                                 // most blocks per launch
#define KB_CTRL_BYTES 256                           // completion count and row counters at the start of each buffer
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

// What one call moves; rows are hidden / 8 vectors of 8 bfloat16 (uint4). Each rank's buffer holds
// its completion count (word 0, only grows), three row counters (words 1..3, one per epoch mod 3:
// the counter of epoch e is reset during epoch e - 1, three epochs after its last use) and two
// parities of receive areas (rows [world * tokens][hidden], ids [world * tokens]); all start at 0.
struct KbArgs {
  const uint4* x;                   // [tokens, hidden] this rank's tokens
  const bool* is_token_in_rank;     // [tokens, world]: token t goes to rank q
  uint4* recv_x;                    // [world * tokens, hidden] out: rows 0 .. *recv_count - 1, any order
  int* recv_ids;                    // [world * tokens] out: row k's token id, source rank * tokens + token
  int* recv_count;                  // [1] out: rows received
  uint4* rrows[KB_MAXW];            // every rank's receive rows for this epoch (rrows[rank] is local)
  int* rids[KB_MAXW];               // every rank's receive ids for this epoch
  uint32_t* rows_used[KB_MAXW];     // every rank's row counter of this epoch: reserve rows here
  uint32_t* rows_next;              // this rank's row counter of the next epoch: set it to 0 in this call,
                                    // before this rank bumps any completion count
  uint32_t* done[KB_MAXW];          // every rank's completion count (only grows)
  int tokens, hidden;
  int rank, world;
  uint32_t epoch;                   // 1, 2, 3, ...: the call number, the same on every rank
};

// >>> EDIT helpers
// <<< EDIT helpers

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere, every call).
__global__ void kb_dispatch_kernel(KbArgs a) {
  // >>> EDIT kernel
  // Block b sends a contiguous range of this rank's tokens. It counts its rows per destination,
  // reserves them with one atomicAdd_system per destination, hands out rows inside the block with
  // shared atomics (the order is free), stores each row with a warp per token, then bumps every
  // rank's completion count once. Every rank's count reaches epoch * world * blocks when every block
  // of every rank has sent this epoch's rows (a faster rank's bump of the next epoch only comes
  // after it saw all of this epoch's, so it never stands in for a missing one of this epoch).
  __shared__ uint32_t want[KB_MAXW], base[KB_MAXW], next[KB_MAXW];
  const int W = a.world, T = a.tokens, hv = a.hidden / 8;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  const int per = (T + gridDim.x - 1) / gridDim.x;
  const int t0 = min(T, (int)blockIdx.x * per), t1 = min(T, t0 + per);
  if (threadIdx.x < KB_MAXW) want[threadIdx.x] = next[threadIdx.x] = 0;
  if (blockIdx.x == 0 && threadIdx.x == 0) *a.rows_next = 0;
  __syncthreads();
  for (int i = t0 * W + threadIdx.x; i < t1 * W; i += blockDim.x)
    if (a.is_token_in_rank[i]) atomicAdd(&want[i % W], 1u);
  __syncthreads();
  if (threadIdx.x < W && want[threadIdx.x] > 0) base[threadIdx.x] = atomicAdd_system(a.rows_used[threadIdx.x], want[threadIdx.x]);
  __syncthreads();
  for (int t = t0 + warp; t < t1; t += nwarps) {
    uint4* dst[KB_MAXW];
#pragma unroll
    for (int q = 0; q < KB_MAXW; ++q) {
      dst[q] = nullptr;
      if (q < W && a.is_token_in_rank[(size_t)t * W + q]) {
        uint32_t row = 0;
        if (lane == 0) row = base[q] + atomicAdd(&next[q], 1u);
        row = __shfl_sync(0xffffffffu, row, 0);
        dst[q] = a.rrows[q] + (size_t)row * hv;
        if (lane == 0) a.rids[q][row] = a.rank * T + t;
      }
    }
    const uint4* src = a.x + (size_t)t * hv;
    for (int v = lane; v < hv; v += 32) {
      const uint4 val = src[v];
#pragma unroll
      for (int q = 0; q < KB_MAXW; ++q)
        if (dst[q] != nullptr) dst[q][v] = val;
    }
  }
  __syncthreads();   // this block's rows (and the reset of the next counter) are stored before its bumps
  if (threadIdx.x < W) {
    __threadfence_system();
    atomicAdd_system(a.done[threadIdx.x], 1u);
  }
  if (threadIdx.x == 0) kb_wait_geq(a.done[a.rank], a.epoch * (uint32_t)W * gridDim.x);
  __syncthreads();   // every block of every source is done
  const uint32_t n = kb_ld_acquire(a.rows_used[a.rank]);
  if (blockIdx.x == 0 && threadIdx.x == 0) *a.recv_count = (int)n;
  const uint4* in = a.rrows[a.rank];
  const size_t total = (size_t)n * hv;
  for (size_t v = (size_t)blockIdx.x * blockDim.x + threadIdx.x; v < total; v += (size_t)gridDim.x * blockDim.x)
    a.recv_x[v] = in[v];
  for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (size_t)gridDim.x * blockDim.x)
    a.recv_ids[k] = a.rids[a.rank][k];
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
static KbArgs kb_base;            // pointers of epoch parity 0, row counter 0
static long long kb_max_tokens;   // the largest tokens
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

// Bytes of one parity's receive rows and ids, and of each rank's IPC buffer: the control words, two
// parities of receive areas (rows, then ids rounded up to 16 bytes).
static size_t kb_rows_bytes(int world, long long max_elems) { return (size_t)world * max_elems * 2; }
static size_t kb_ids_bytes(int world, long long max_tokens) { return ((size_t)world * max_tokens * 4 + 15) / 16 * 16; }
static size_t kb_area_bytes(int world, long long max_tokens, long long max_elems) {
  return kb_rows_bytes(world, max_elems) + kb_ids_bytes(world, max_tokens);
}
extern "C" size_t kb_buffer_bytes(int world, long long max_tokens, long long max_elems) {
  return KB_CTRL_BYTES + 2 * kb_area_bytes(world, max_tokens, max_elems);
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
    kb_base.done[q] = (uint32_t*)bufs[q];
    kb_base.rows_used[q] = (uint32_t*)bufs[q] + 1;
    kb_base.rrows[q] = (uint4*)((char*)bufs[q] + KB_CTRL_BYTES);
    kb_base.rids[q] = (int*)((char*)bufs[q] + KB_CTRL_BYTES + kb_rows_bytes(world, max_elems));
  }
  kb_base.rows_next = (uint32_t*)bufs[rank] + 1;
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
  KB_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kb_dispatch_kernel, kb_threads, 0));
  if (kb_blocks > per_sm * sms) {
    snprintf(kb_error, sizeof(kb_error), "%d blocks of %d threads cannot all be resident (%d SMs x %d blocks)",
             kb_blocks, kb_threads, sms, per_sm);
    return -1;
  }
  return 0;
}

// Dispatch this rank's tokens (bfloat16 [tokens, hidden], hidden a multiple of 8) to the ranks
// is_token_in_rank names; on `stream`, tokens and hidden the same on every rank.
extern "C" int kb_dispatch(const void* x, const bool* is_token_in_rank, void* recv_x, int* recv_ids, int* recv_count,
                           int tokens, int hidden, cudaStream_t stream) {
  if (tokens < 1 || hidden < 8 || hidden % 8 != 0 || tokens > kb_max_tokens ||
      (long long)tokens * hidden > kb_max_elems) {
    snprintf(kb_error, sizeof(kb_error), "bad shape [%d, %d] (hidden a multiple of 8, at most %lld tokens and "
             "%lld elements)", tokens, hidden, kb_max_tokens, kb_max_elems);
    return -1;
  }
  KbArgs a = kb_base;
  a.epoch = ++kb_epoch;
  const size_t area = kb_area_bytes(a.world, kb_max_tokens, kb_max_elems) * (a.epoch & 1);
  for (int q = 0; q < a.world; ++q) {
    a.rrows[q] = (uint4*)((char*)a.rrows[q] + area);
    a.rids[q] = (int*)((char*)a.rids[q] + area);
    a.rows_used[q] += a.epoch % 3;
  }
  a.rows_next += (a.epoch + 1) % 3;
  a.x = (const uint4*)x;
  a.is_token_in_rank = is_token_in_rank;
  a.recv_x = (uint4*)recv_x;
  a.recv_ids = recv_ids;
  a.recv_count = recv_count;
  a.tokens = tokens;
  a.hidden = hidden;
  kb_dispatch_kernel<<<kb_blocks, kb_threads, 0, stream>>>(a);
  KB_CHECK(cudaGetLastError());
  return 0;
}
