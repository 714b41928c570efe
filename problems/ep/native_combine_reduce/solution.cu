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
// <<< EDIT helpers

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere, every call).
__global__ void kb_combine_kernel(KbArgs a) {
  // >>> EDIT kernel
  // Send: the rows of one (owner, token) pair are consecutive; a warp takes each pair whose first
  // row lies in its block's range, sums weight * row over the pair's rows in fp32 and stores the
  // sum into the owner's slot (source = this rank, token), then tags the slot with the epoch.
  // Each block raises its flag at every rank and waits for every block of every source. Receive:
  // for each token, the tagged slots of the sources, in rank order, summed in fp32.
  // Reuse is safe: rank s writes this parity of rank q's slots again two epochs later, after
  // waiting (in the epoch in between) for flags rank q raises only once its kernel of this epoch
  // (the reads of the slots) is done; a tag from two epochs ago is not this epoch.
  const int W = a.world, T = a.tokens, H = a.hidden, R = a.rows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  const int per = (R + gridDim.x - 1) / gridDim.x;
  const int i0 = min(R, (int)blockIdx.x * per), i1 = min(R, i0 + per);
  for (int i = i0 + warp; i < i1; i += nwarps) {
    const int64_t s = a.src_rank[i], t = a.src_token[i];
    if (i > 0 && a.src_rank[i - 1] == s && a.src_token[i - 1] == t) continue;   // not the pair's first row
    int end = i + 1;
    while (end < R && a.src_rank[end] == s && a.src_token[end] == t) ++end;
    float* dst = a.slots[s] + ((size_t)a.rank * T + t) * H;
    for (int c = lane * 4; c < H; c += 128) {
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int j = i; j < end; ++j) {
        const float w = a.weights[j];
        const uint2 raw = *reinterpret_cast<const uint2*>(a.expert_out + (size_t)j * H + c);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
        const float2 lo = __bfloat1622float2(h[0]), hi = __bfloat1622float2(h[1]);
        acc.x += w * lo.x;
        acc.y += w * lo.y;
        acc.z += w * hi.x;
        acc.w += w * hi.y;
      }
      *reinterpret_cast<float4*>(dst + c) = acc;
    }
    if (lane == 0) a.tags[s][(size_t)a.rank * T + t] = a.epoch;
  }
  __syncthreads();   // this block's slots and tags are stored before its flags go up
  if (threadIdx.x < W) {
    __threadfence_system();
    kb_st_release(&a.flags[threadIdx.x][a.rank * KB_MAXB + blockIdx.x], a.epoch);
  }
  for (int k = threadIdx.x; k < W * (int)gridDim.x; k += blockDim.x)
    kb_wait_geq(&a.flags[a.rank][(k / gridDim.x) * KB_MAXB + k % gridDim.x], a.epoch);
  __syncthreads();   // every source is done
  const float* slots = a.slots[a.rank];
  const uint32_t* tags = a.tags[a.rank];
  for (int t = blockIdx.x; t < T; t += gridDim.x) {
    unsigned present = 0;
    for (int s = 0; s < W; ++s)
      if (tags[(size_t)s * T + t] == a.epoch) present |= 1u << s;
    for (int c = threadIdx.x * 4; c < H; c += blockDim.x * 4) {
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int s = 0; s < W; ++s) {
        if (!((present >> s) & 1u)) continue;
        const float4 p = *reinterpret_cast<const float4*>(slots + ((size_t)s * T + t) * H + c);
        acc.x += p.x;
        acc.y += p.y;
        acc.z += p.z;
        acc.w += p.w;
      }
      uint2 o;
      __nv_bfloat162* oh = reinterpret_cast<__nv_bfloat162*>(&o);
      oh[0] = __floats2bfloat162_rn(acc.x, acc.y);
      oh[1] = __floats2bfloat162_rn(acc.z, acc.w);
      *reinterpret_cast<uint2*>(a.out + (size_t)t * H + c) = o;
    }
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
