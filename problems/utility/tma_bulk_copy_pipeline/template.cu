// TMA bulk-copy pipeline inside a CTA (problems/utility/tma_bulk_copy_pipeline).
// One producer thread per block streams tiles of x into a ring of KB_STAGES shared-memory stages
// with cp.async.bulk (the copy completes the stage's mbarrier transaction count); KB_CONSUMER_WARPS
// warps turn each staged tile into y = x * x + x and hand the stage back through empty[s].
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#define KB_TILE 4096                         // floats per tile (16 KiB; n is a multiple of it)
#define KB_STAGES 4                          // shared-memory stages
#define KB_CONSUMER_WARPS 8
#define KB_THREADS (32 * (1 + KB_CONSUMER_WARPS))
#define KB_SMEM_BYTES (KB_STAGES * KB_TILE * 4)   // dynamic shared memory per block
#define KB_SPIN_NS 10000000000ull            // a wait longer than 10 s traps: the job fails instead of hanging

// ---- mbarrier and bulk-copy helpers (fixed; sm_90) ------------------------------------------------------
__device__ __forceinline__ uint32_t kb_smem(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Before use, by one thread: `count` arrivals (plus the expected bytes) complete a phase.
__device__ __forceinline__ void kb_mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(kb_smem(bar)), "r"(count) : "memory");
}
// After the inits, by the thread that made them, then __syncthreads(): the bulk-copy unit sees them.
__device__ __forceinline__ void kb_fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival (release: this thread's earlier shared-memory reads and writes happen before the phase completes).
__device__ __forceinline__ void kb_mbar_arrive(uint64_t* bar) {
  asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared::cta.b64 st, [%0];\n\t}" ::"r"(kb_smem(bar)) : "memory");
}
// One arrival that also expects `bytes` more bytes of bulk copies before the phase can complete.
__device__ __forceinline__ void kb_mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t}"
               ::"r"(kb_smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ bool kb_mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(kb_smem(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ unsigned long long kb_now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Wait for the phase of parity `parity` to complete (acquire: the bulk copies that completed it are
// visible). A bounded spin: a phase that never completes traps after KB_SPIN_NS instead of hanging.
__device__ __forceinline__ void kb_mbar_wait(uint64_t* bar, uint32_t parity) {
  const unsigned long long t0 = kb_now_ns();
  while (!kb_mbar_try_wait(bar, parity)) {
    if (kb_now_ns() - t0 > KB_SPIN_NS) {
      printf("kb: block %d thread %d waited more than 10 s for an mbarrier phase (parity %u)\n", blockIdx.x,
             threadIdx.x, parity);
      __trap();
    }
  }
}
// Bulk copy global -> shared of `bytes` (a multiple of 16, both addresses 16-byte aligned); it
// completes `bytes` of the transaction count of `bar` when done.
__device__ __forceinline__ void kb_bulk_g2s(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(kb_smem(smem_dst)), "l"(gmem_src), "r"(bytes), "r"(kb_smem(bar)) : "memory");
}
// Tiles t = blockIdx.x, blockIdx.x + gridDim.x, ... of x (tiles = n / KB_TILE) go through this block.
__global__ void __launch_bounds__(KB_THREADS) kb_tma_kernel(const float* x, float* y, long long tiles) {
  extern __shared__ __align__(128) float stage[];        // [KB_STAGES][KB_TILE]
  __shared__ __align__(8) uint64_t full[KB_STAGES];
  __shared__ __align__(8) uint64_t empty[KB_STAGES];
  // >>> EDIT pipeline
  // TODO: initialise the barriers (then kb_fence_mbar_init and __syncthreads), then run the
  // producer thread (bulk copies into the stages) and the consumer warps.
  (void)x; (void)y; (void)tiles; (void)stage; (void)full; (void)empty;
  // <<< EDIT pipeline
}

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static char kb_error[256];
static int kb_blocks_per_sm = 2;

extern "C" const char* kb_last_error() { return kb_error; }

extern "C" int kb_init(int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(kb_tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, KB_SMEM_BYTES);
  if (e != cudaSuccess) snprintf(kb_error, sizeof(kb_error), "kb_init: %s", cudaGetErrorString(e));
  return (int)e;
}

// y <- x * x + x on n floats (n a multiple of KB_TILE), on `stream`.
extern "C" int kb_tma_pipeline(const float* x, float* y, long long n, cudaStream_t stream) {
  if (n % KB_TILE != 0 || ((uintptr_t)x | (uintptr_t)y) % 16 != 0) {
    snprintf(kb_error, sizeof(kb_error), "n = %lld is not a multiple of %d (or x, y not 16-byte aligned)", n, KB_TILE);
    return -1;
  }
  const long long tiles = n / KB_TILE;
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const long long most = (long long)kb_blocks_per_sm * sms;
  const long long blocks = tiles < most ? tiles : most;
  kb_tma_kernel<<<(unsigned)blocks, KB_THREADS, KB_SMEM_BYTES, stream>>>(x, y, tiles);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) snprintf(kb_error, sizeof(kb_error), "launch: %s", cudaGetErrorString(e));
  return (int)e;
}
