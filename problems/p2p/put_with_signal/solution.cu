// Put with signal over CUDA IPC (problems/p2p/put_with_signal).
// Rank r puts x into rank (r + 1) % W's receive buffer chunk by chunk, setting one signal word per
// chunk; rank r + 1 consumes each chunk once its signal is set: y = x + received.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_CHUNK_BYTES 65536                    // bytes per chunk: one signal word each
#define KB_CHUNK_VECS (KB_CHUNK_BYTES / 16)
#define KB_MAXB 256                             // most blocks per launch (producers + consumers)
#define KB_SPIN_NS 10000000000ull               // a wait longer than 10 s traps: the job fails instead of hanging

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

// What one call moves. Receive buffers alternate by epoch parity; every word starts at 0.
struct KbArgs {
  const uint4* x;              // this rank's input: vecs 16-byte vectors (8 bfloat16 each)
  uint4* y;                    // this rank's output: x + received
  uint4* put_data;             // the next rank's receive buffer for this epoch (peer memory, NVLink)
  const uint4* my_data;        // this rank's receive buffer for this epoch (the previous rank puts here)
  uint32_t* put_signal;        // the next rank's signal words, one per chunk (peer memory)
  const uint32_t* my_signal;   // this rank's signal words, set by the previous rank
  const uint32_t* my_credit;   // this rank's credit words [KB_MAXB], set by the next rank's consumers
  uint32_t* give_credit;       // the previous rank's credit words (peer memory)
  long long vecs;              // 16-byte vectors in x (the same on every rank)
  long long chunks;            // chunks in x: chunk c holds vectors [c * KB_CHUNK_VECS, ...)
  int producers;               // blocks [0, producers) produce, the others consume
  uint32_t epoch;              // 1, 2, 3, ...: the call number, the same on every rank
};

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere, every call).
__global__ void kb_put_signal_kernel(KbArgs a) {
  // >>> EDIT kernel
  // Producer p puts chunks p, p + P, ...; consumer j consumes chunks j, j + C, ... (C consumers,
  // the same every call, so chunk c always belongs to consumer c % C). Credit word j is raised to
  // the epoch by consumer j once it is done with all its chunks of that epoch, and every consumer
  // raises it every call, even with no chunk, so the words stay in step when the size changes.
  // A producer overwrites chunk c of this parity only once credit[c % C] >= epoch - 2.
  const int P = a.producers, C = gridDim.x - a.producers;
  if ((int)blockIdx.x < P) {
    for (long long c = blockIdx.x; c < a.chunks; c += P) {
      const long long lo = c * KB_CHUNK_VECS, hi = min(a.vecs, lo + KB_CHUNK_VECS);
      if (threadIdx.x == 0) kb_wait_geq(&a.my_credit[c % C], a.epoch - 2);
      __syncthreads();
      for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) a.put_data[i] = a.x[i];
      __syncthreads();   // the whole chunk is stored before the signal (cumulative through bar.sync)
      if (threadIdx.x == 0) kb_st_release(&a.put_signal[c], a.epoch);
    }
  } else {
    const int j = blockIdx.x - P;
    for (long long c = j; c < a.chunks; c += C) {
      const long long lo = c * KB_CHUNK_VECS, hi = min(a.vecs, lo + KB_CHUNK_VECS);
      if (threadIdx.x == 0) kb_wait_geq(&a.my_signal[c], a.epoch);
      __syncthreads();
      for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const uint4 r = __ldcg(&a.my_data[i]);
        const uint4 v = a.x[i];
        const __nv_bfloat162* hr = reinterpret_cast<const __nv_bfloat162*>(&r);
        const __nv_bfloat162* hv = reinterpret_cast<const __nv_bfloat162*>(&v);
        uint4 out;
        __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 fv = __bfloat1622float2(hv[k]), fr = __bfloat1622float2(hr[k]);
          o[k] = __floats2bfloat162_rn(fv.x + fr.x, fv.y + fr.y);
        }
        a.y[i] = out;
      }
    }
    __syncthreads();     // every read of this consumer's chunks is done before the credit
    if (threadIdx.x == 0) kb_st_release(&a.give_credit[j], a.epoch);
  }
  // <<< EDIT kernel
}

// Producer blocks, consumer blocks (together at most KB_MAXB) and threads per block, chosen once
// at setup. All blocks of a launch must be able to run at once (consumers wait for producers).
static void kb_launch_shape(int* producers, int* consumers, int* threads) {
  // >>> EDIT launch
  *producers = 32;
  *consumers = 32;
  *threads = 512;
  // <<< EDIT launch
}

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static char kb_error[256];
static KbArgs kb_base;            // pointers of epoch parity 0
static long long kb_data_bytes;   // bytes of one receive buffer
static uint32_t kb_epoch;
static int kb_producers, kb_consumers, kb_threads;

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

// Signal words (one per chunk of the largest size), then KB_MAXB credit words, rounded up to 4 KiB.
static size_t kb_flag_bytes(long long data_bytes) {
  const size_t chunks = (size_t)((data_bytes + KB_CHUNK_BYTES - 1) / KB_CHUNK_BYTES);
  return ((chunks + KB_MAXB) * 4 + 4095) / 4096 * 4096;
}

extern "C" int kb_init(int device) {
  KB_CHECK(cudaSetDevice(device));
  return 0;
}

// Bytes of each rank's IPC buffer: the signal and credit words, then two receive buffers.
extern "C" size_t kb_buffer_bytes(long long data_bytes) { return kb_flag_bytes(data_bytes) + 2 * (size_t)data_bytes; }

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
  const int next = (rank + 1) % world, prev = (rank - 1 + world) % world;
  const size_t flag_bytes = kb_flag_bytes(data_bytes);
  const size_t signals = (size_t)((data_bytes + KB_CHUNK_BYTES - 1) / KB_CHUNK_BYTES);
  memset(&kb_base, 0, sizeof(kb_base));
  kb_base.put_data = (uint4*)((char*)bufs[next] + flag_bytes);
  kb_base.my_data = (const uint4*)((const char*)bufs[rank] + flag_bytes);
  kb_base.put_signal = (uint32_t*)bufs[next];
  kb_base.my_signal = (const uint32_t*)bufs[rank];
  kb_base.my_credit = (const uint32_t*)bufs[rank] + signals;
  kb_base.give_credit = (uint32_t*)bufs[prev] + signals;
  kb_data_bytes = data_bytes;
  kb_epoch = 0;
  kb_producers = 1;
  kb_consumers = 1;
  kb_threads = 32;
  kb_launch_shape(&kb_producers, &kb_consumers, &kb_threads);
  if (kb_producers < 1 || kb_consumers < 1 || kb_producers + kb_consumers > KB_MAXB || kb_threads < 1 ||
      kb_threads > 1024) {
    snprintf(kb_error, sizeof(kb_error), "kb_launch_shape chose %d + %d blocks of %d threads (1.. each, at most %d "
             "blocks, 1..1024 threads)", kb_producers, kb_consumers, kb_threads, KB_MAXB);
    return -1;
  }
  return 0;
}

// y <- x + the previous rank's x, x -> the next rank; bytes a multiple of 16, the same on every rank.
extern "C" int kb_put_signal(const void* x, void* y, long long bytes, cudaStream_t stream) {
  if (bytes % 16 != 0 || bytes > kb_data_bytes) {
    snprintf(kb_error, sizeof(kb_error), "bad size %lld (multiple of 16, at most %lld)", bytes, kb_data_bytes);
    return -1;
  }
  KbArgs a = kb_base;
  a.epoch = ++kb_epoch;
  const size_t half = (size_t)kb_data_bytes * (a.epoch & 1);
  a.put_data = (uint4*)((char*)a.put_data + half);
  a.my_data = (const uint4*)((const char*)a.my_data + half);
  a.x = (const uint4*)x;
  a.y = (uint4*)y;
  a.vecs = bytes / 16;
  a.chunks = (a.vecs + KB_CHUNK_VECS - 1) / KB_CHUNK_VECS;
  a.producers = kb_producers;
  kb_put_signal_kernel<<<kb_producers + kb_consumers, kb_threads, 0, stream>>>(a);
  KB_CHECK(cudaGetLastError());
  return 0;
}
