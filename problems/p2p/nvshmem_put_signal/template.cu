// Put-with-signal all-to-all over NVSHMEM (problems/p2p/nvshmem_put_signal). Every PE puts chunk q of
// its x into PE q's symmetric receive slot for it, piece by piece, each piece with a signal word that
// NVSHMEM sets only after the piece has landed; each PE copies the pieces it receives into y as their
// signals arrive, and hands credit back to the senders once a receive slot may be written again.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXW 8                               // most PEs
#define KB_MAXB 256                             // most blocks per launch (producers + consumers)
#define KB_PIECE_BYTES 65536                    // bytes per piece: one put and one signal word each
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

// Wait until the 64-bit signal word *sig >= value (signals only grow; compared modulo 2^64, so
// value = epoch - 2 at epoch 1 is already met). Traps after KB_SPIN_NS.
__device__ __forceinline__ void kb_wait_signal(const uint64_t* sig, uint64_t value) {
  const unsigned long long t0 = kb_now_ns();
  for (;;) {
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(sig) : "memory");
    if ((int64_t)(v - value) >= 0) return;
    if (kb_now_ns() - t0 > KB_SPIN_NS) {
      printf("kb: block %d waited more than 10 s for signal %p to reach %llu\n", blockIdx.x, sig,
             (unsigned long long)value);
      __trap();
    }
  }
}

// What one call moves. The symmetric heap has the same layout on every PE (all 0 at first):
//   sig    [2 parities][KB_MAXW (source)][max_pieces] uint64: piece p from that source has landed
//   credit [KB_MAXW (receiver)][KB_MAXB] uint64: consumer block j of that receiver is done with an epoch
//   recv   [2 parities][KB_MAXW (source)][slot_bytes]: the pieces put here
// Pointers into it are symmetric addresses: this PE's own memory, and the `dest` / `sig_addr` of
// NVSHMEM calls that name another PE.
struct KbArgs {
  const char* x;               // this PE's input: W chunks of chunk_bytes (bfloat16)
  char* y;                     // this PE's output: chunk q is chunk `rank` of PE q's x
  char* recv;                  // this epoch's receive slots: recv + s * slot_bytes holds source s's chunk
  uint64_t* sig;               // this epoch's signal words: sig[s * max_pieces + p]
  uint64_t* credit;            // credit[q * KB_MAXB + j]: set to the epoch by consumer j of PE q
  long long chunk_bytes;       // bytes per chunk this call (a multiple of 16)
  long long slot_bytes;        // bytes between receive slots (the largest chunk)
  int pieces;                  // pieces per chunk this call: piece p is bytes [p * KB_PIECE_BYTES, ...)
  int max_pieces;              // signal words per source
  int producers;               // blocks [0, producers) put, the others consume
  int rank, world;
  uint64_t epoch;              // 1, 2, 3, ...: the call number, the same on every PE
};

// Runs on every PE with the grid kb_launch_shape chose (the same everywhere, every call).
__global__ void kb_all_to_all_kernel(KbArgs a) {
  // >>> EDIT kernel
  // TODO: producer blocks put the pieces of chunk q of x into PE q's receive slot for this PE with
  // nvshmemx_putmem_signal_nbi_block (one signal word per piece, set to the epoch), once PE q's
  // consumers have given credit for epoch - 2; consumer blocks wait for each piece's signal, copy it
  // into y (their own chunk straight from x) and give credit to every sender with nvshmemx_signal_op.
  (void)a;
  // <<< EDIT kernel
}

// Producer blocks, consumer blocks (together at most KB_MAXB) and threads per block, chosen once
// at setup. All blocks of a launch must be resident at once (consumers wait for producers of the
// other PEs, producers for their consumers).
static void kb_launch_shape(int* producers, int* consumers, int* threads) {
  // >>> EDIT launch
  // TODO: choose the grid.
  *producers = 1;
  *consumers = 1;
  *threads = 32;
  // <<< EDIT launch
}

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static char kb_error[256];
static KbArgs kb_base;            // pointers of epoch parity 0
static long long kb_data_bytes;   // bytes of the largest x
static size_t kb_sig_bytes;       // bytes of one parity's signal words
static uint64_t kb_epoch;
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

extern "C" int kb_init(int device) {
  KB_CHECK(cudaSetDevice(device));
  return 0;
}

extern "C" int kb_unique_id_bytes() { return (int)sizeof(nvshmemx_uniqueid_t); }

// Rank 0 makes the id; the harness hands it to every rank.
extern "C" int kb_unique_id(void* out) {
  nvshmemx_uniqueid_t id;
  if (nvshmemx_get_uniqueid(&id) != 0) {
    snprintf(kb_error, sizeof(kb_error), "nvshmemx_get_uniqueid failed");
    return -1;
  }
  memcpy(out, &id, sizeof(id));
  return 0;
}

// Every rank at once (collective): NVSHMEM from the unique id (PE = rank), the zeroed symmetric
// heap, the grid.
extern "C" int kb_setup(const void* id_bytes, int rank, int world, long long data_bytes) {
  if (world < 1 || world > KB_MAXW || data_bytes < 16 || data_bytes % (16LL * world) != 0) {
    snprintf(kb_error, sizeof(kb_error), "world size %d (1..%d), data bytes %lld (a multiple of 16 x world)", world,
             KB_MAXW, data_bytes);
    return -1;
  }
  nvshmemx_uniqueid_t id;
  memcpy(&id, id_bytes, sizeof(id));
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  if (nvshmemx_set_attr_uniqueid_args(rank, world, &id, &attr) != 0 ||
      nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0) {
    snprintf(kb_error, sizeof(kb_error), "NVSHMEM initialization failed");
    return -1;
  }
  if (nvshmem_my_pe() != rank || nvshmem_n_pes() != world) {
    snprintf(kb_error, sizeof(kb_error), "NVSHMEM made PE %d of %d for rank %d of %d", nvshmem_my_pe(),
             nvshmem_n_pes(), rank, world);
    return -1;
  }
  const long long slot = data_bytes / world;
  const int max_pieces = (int)((slot + KB_PIECE_BYTES - 1) / KB_PIECE_BYTES);
  kb_sig_bytes = (size_t)KB_MAXW * max_pieces * 8;
  const size_t credit_bytes = (size_t)KB_MAXW * KB_MAXB * 8;
  const size_t head = (2 * kb_sig_bytes + credit_bytes + 4095) / 4096 * 4096;
  const size_t bytes = head + 2 * (size_t)data_bytes;
  char* heap = (char*)nvshmem_malloc(bytes);         // collective: the same size on every PE
  if (heap == nullptr) {
    snprintf(kb_error, sizeof(kb_error), "nvshmem_malloc(%zu) failed", bytes);
    return -1;
  }
  KB_CHECK(cudaMemset(heap, 0, bytes));
  KB_CHECK(cudaDeviceSynchronize());
  for (int q = 0; q < world; ++q) {
    if (nvshmem_ptr(heap, q) == nullptr) {
      snprintf(kb_error, sizeof(kb_error), "PE %d cannot reach PE %d's memory by load/store (NVLink)", rank, q);
      return -1;
    }
  }
  nvshmem_barrier_all();                              // every PE's heap zeroed before anyone's first put
  memset(&kb_base, 0, sizeof(kb_base));
  kb_base.sig = (uint64_t*)heap;
  kb_base.credit = (uint64_t*)(heap + 2 * kb_sig_bytes);
  kb_base.recv = heap + head;
  kb_base.slot_bytes = slot;
  kb_base.max_pieces = max_pieces;
  kb_base.rank = rank;
  kb_base.world = world;
  kb_data_bytes = data_bytes;
  kb_epoch = 0;
  kb_producers = 1;
  kb_consumers = 1;
  kb_threads = 32;
  kb_launch_shape(&kb_producers, &kb_consumers, &kb_threads);
  if (kb_producers < 1 || kb_consumers < 1 || kb_producers + kb_consumers > KB_MAXB || kb_threads < 32 ||
      kb_threads > 1024 || kb_threads % 32 != 0) {
    snprintf(kb_error, sizeof(kb_error), "kb_launch_shape chose %d + %d blocks of %d threads (1.. each, at most %d "
             "blocks, 32..1024 threads by 32)", kb_producers, kb_consumers, kb_threads, KB_MAXB);
    return -1;
  }
  int dev = 0, sms = 0, per_sm = 0;
  KB_CHECK(cudaGetDevice(&dev));
  KB_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  KB_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kb_all_to_all_kernel, kb_threads, 0));
  if (kb_producers + kb_consumers > per_sm * sms) {
    snprintf(kb_error, sizeof(kb_error), "%d blocks of %d threads cannot all be resident (%d SMs x %d blocks)",
             kb_producers + kb_consumers, kb_threads, sms, per_sm);
    return -1;
  }
  return 0;
}

// y <- the all-to-all of x (W equal chunks); bytes a multiple of 16 x world, the same on every PE.
extern "C" int kb_all_to_all(const void* x, void* y, long long bytes, cudaStream_t stream) {
  if (bytes < 16 || bytes % (16LL * kb_base.world) != 0 || bytes > kb_data_bytes) {
    snprintf(kb_error, sizeof(kb_error), "bad size %lld (a multiple of 16 x %d PEs, at most %lld)", bytes,
             kb_base.world, kb_data_bytes);
    return -1;
  }
  KbArgs a = kb_base;
  a.epoch = ++kb_epoch;
  const int parity = (int)(a.epoch & 1);
  a.sig = (uint64_t*)((char*)a.sig + kb_sig_bytes * parity);
  a.recv += (size_t)kb_data_bytes * parity;
  a.x = (const char*)x;
  a.y = (char*)y;
  a.chunk_bytes = bytes / a.world;
  a.pieces = (int)((a.chunk_bytes + KB_PIECE_BYTES - 1) / KB_PIECE_BYTES);
  a.producers = kb_producers;
  kb_all_to_all_kernel<<<kb_producers + kb_consumers, kb_threads, 0, stream>>>(a);
  KB_CHECK(cudaGetLastError());
  return 0;
}
