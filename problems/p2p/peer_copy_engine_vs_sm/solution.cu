// Peer copy over CUDA IPC with copy engines or SMs (problems/p2p/peer_copy_engine_vs_sm).
// Rank r sends x to rank (r + 1) % W and receives rank (r - 1 + W) % W's x into y, through buffers
// that every rank allocated and the harness mapped into its neighbours with CUDA IPC.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_FLAG_BYTES 4096                // flag words at the start of each rank's IPC buffer (all 0 at first)
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
// Wait until *flag >= value (compared modulo 2^32). Traps after KB_SPIN_NS.
__device__ __forceinline__ void kb_wait_geq(const uint32_t* flag, uint32_t value) {
  const unsigned long long t0 = kb_now_ns();
  while ((int32_t)(kb_ld_acquire(flag) - value) < 0) {
    if (kb_now_ns() - t0 > KB_SPIN_NS) {
      printf("kb: block %d waited more than 10 s for flag %p to reach %u\n", blockIdx.x, flag, value);
      __trap();
    }
  }
}

// ---- errors (fixed) -----------------------------------------------------------------------------------
static char kb_error[256];

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

// The buffers as mapped in this process. Each rank's IPC buffer: KB_FLAG_BYTES of flag words, then
// two data areas of data_bytes (at + KB_FLAG_BYTES and + KB_FLAG_BYTES + data_bytes).
struct KbPeers {
  char* mine;                 // this rank's buffer
  char* next;                 // rank (r + 1) % W's buffer (peer memory, NVLink)
  char* prev;                 // rank (r - 1 + W) % W's buffer (peer memory, NVLink)
  long long data_bytes;       // bytes of one data area (the largest size of the job)
};
static KbPeers kb_peers;

// >>> EDIT helpers
// The flags: words [0, KB_NB) "full" (raised by the previous rank once its data is in my area of
// this epoch's parity), words [KB_NB, 2 KB_NB) "acked" (raised by the next rank once it has copied
// my data out of its area). Both paths below move all 2 KB_NB words to the epoch every call, so a
// call on one path finds the flags of a call on the other in step.
#define KB_NB 64                          // blocks of the SM path, and flag words of each kind
#define KB_SM_THREADS 512
#define KB_CE_MIN_BYTES (4LL << 20)       // from this size on the copy engines move the data

struct KbFlags {
  uint32_t* next_full;        // the next rank's "full" words
  const uint32_t* my_full;
  const uint32_t* my_acked;   // this rank's "acked" words (raised by the next rank)
  uint32_t* prev_acked;       // the previous rank's "acked" words
};

// SM path: block b moves slice b; flag word b pairs with block b of the neighbours.
__global__ void __launch_bounds__(KB_SM_THREADS) kb_sm_copy(const uint4* x, uint4* y, uint4* next_data,
                                                           const uint4* my_data, KbFlags f, long long vecs,
                                                           uint32_t epoch) {
  const int b = blockIdx.x;
  const long long per = (vecs + gridDim.x - 1) / gridDim.x;
  const long long lo = min(vecs, (long long)b * per), hi = min(vecs, lo + per);
  if (threadIdx.x == 0) kb_wait_geq(&f.my_acked[b], epoch - 2);
  __syncthreads();
  for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) next_data[i] = x[i];
  __syncthreads();
  if (threadIdx.x == 0) kb_st_release(&f.next_full[b], epoch);
  if (threadIdx.x == 0) kb_wait_geq(&f.my_full[b], epoch);
  __syncthreads();
  for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) y[i] = __ldcg(&my_data[i]);
  __syncthreads();
  if (threadIdx.x == 0) kb_st_release(&f.prev_acked[b], epoch);
}

// Copy-engine path: one-block kernels around the copies, thread t on flag word t. A kernel starts
// only after the copy before it on the stream has completed, so its release covers the copy.
__global__ void kb_wait_words(const uint32_t* mine, uint32_t value) {
  if (threadIdx.x < KB_NB) kb_wait_geq(&mine[threadIdx.x], value);
}
__global__ void kb_raise_words(uint32_t* remote, uint32_t value, const uint32_t* mine, uint32_t want) {
  if (threadIdx.x < KB_NB) {
    __threadfence_system();
    kb_st_release(&remote[threadIdx.x], value);
    if (mine != nullptr) kb_wait_geq(&mine[threadIdx.x], want);
  }
}
// <<< EDIT helpers

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static uint32_t kb_epoch;

extern "C" int kb_init(int device) {
  KB_CHECK(cudaSetDevice(device));
  return 0;
}

// Bytes of each rank's IPC buffer: the flag words, then two data areas of data_bytes.
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
  kb_peers.mine = (char*)bufs[rank];
  kb_peers.next = (char*)bufs[(rank + 1) % world];
  kb_peers.prev = (char*)bufs[(rank - 1 + world) % world];
  kb_peers.data_bytes = data_bytes;
  kb_epoch = 0;
  return 0;
}

// y <- the previous rank's x, x -> the next rank's y; bytes a multiple of 16 (of 8192 in this job),
// the same on every rank. Returns 0, or an error code with kb_error set.
extern "C" int kb_peer_copy(const void* x, void* y, long long bytes, cudaStream_t stream) {
  if (bytes % 16 != 0 || bytes > kb_peers.data_bytes) {
    snprintf(kb_error, sizeof(kb_error), "bad size %lld (multiple of 16, at most %lld)", bytes, kb_peers.data_bytes);
    return -1;
  }
  const uint32_t epoch = ++kb_epoch;      // 1, 2, 3, ...: the same on every rank
  // >>> EDIT copy
  const size_t half = (size_t)kb_peers.data_bytes * (epoch & 1);
  uint4* next_data = (uint4*)(kb_peers.next + KB_FLAG_BYTES + half);
  const uint4* my_data = (const uint4*)(kb_peers.mine + KB_FLAG_BYTES + half);
  KbFlags f;
  f.next_full = (uint32_t*)kb_peers.next;
  f.my_full = (const uint32_t*)kb_peers.mine;
  f.my_acked = (const uint32_t*)kb_peers.mine + KB_NB;
  f.prev_acked = (uint32_t*)kb_peers.prev + KB_NB;
  if (bytes < KB_CE_MIN_BYTES) {          // small: one kernel beats five launches
    kb_sm_copy<<<KB_NB, KB_SM_THREADS, 0, stream>>>((const uint4*)x, (uint4*)y, next_data, my_data, f, bytes / 16,
                                                   epoch);
    KB_CHECK(cudaGetLastError());
    return 0;
  }
  // the next rank is done with this area (its epoch - 2 copy-out), then the copy engine pushes x there
  kb_wait_words<<<1, KB_NB, 0, stream>>>(f.my_acked, epoch - 2);
  KB_CHECK(cudaGetLastError());
  KB_CHECK(cudaMemcpyAsync(next_data, x, (size_t)bytes, cudaMemcpyDeviceToDevice, stream));
  // tell the next rank, wait for the previous rank's data in my area
  kb_raise_words<<<1, KB_NB, 0, stream>>>(f.next_full, epoch, f.my_full, epoch);
  KB_CHECK(cudaGetLastError());
  KB_CHECK(cudaMemcpyAsync(y, my_data, (size_t)bytes, cudaMemcpyDeviceToDevice, stream));
  // my area is free again for the previous rank
  kb_raise_words<<<1, KB_NB, 0, stream>>>(f.prev_acked, epoch, nullptr, 0);
  KB_CHECK(cudaGetLastError());
  return 0;
  // <<< EDIT copy
}
