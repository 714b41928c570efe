// Host-to-device work FIFO (problems/utility/host_to_device_fifo).
// The host pushes work items into a ring in pinned host memory that is mapped into the GPU; a
// persistent kernel, launched first, takes them out and writes y[j] = table[row_j] * mult_j.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <chrono>

#define KB_SLOTS 1024                      // ring slots (a power of two)
#define KB_BLOCKS 4                        // consumer grid (fixed)
#define KB_THREADS 256
#define KB_SPIN_NS 10000000000ull          // a device wait longer than 10 s traps
#define KB_WAIT_S 10                       // a host wait with no progress for this long gives up

struct alignas(8) KbItem {
  int32_t row;                             // a row of table
  int32_t mult;                            // its multiplier
};

// The ring, in pinned host memory mapped into the device, zeroed once. Item k (counted over the
// whole job, from 0) lives in slot k % KB_SLOTS.
struct KbRing {
  KbItem item[KB_SLOTS];
  uint32_t ready[KB_SLOTS];                // written by the host: (uint32_t)(k + 1) once item k is in its slot
  uint32_t done[KB_SLOTS];                 // written by the device: (uint32_t)(k + 1) once item k was taken out
};

// ---- device helpers (fixed) -------------------------------------------------------------------------
__device__ __forceinline__ void kb_st_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t kb_ld_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// An item as it is in host memory now (not from a cache).
__device__ __forceinline__ KbItem kb_ld_item(const KbItem* p) {
  KbItem it;
  asm volatile("ld.volatile.global.v2.s32 {%0, %1}, [%2];" : "=r"(it.row), "=r"(it.mult) : "l"(p) : "memory");
  return it;
}
__device__ __forceinline__ unsigned long long kb_now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Wait until *flag == value (acquire). Traps after KB_SPIN_NS: a lost item fails instead of hanging.
__device__ __forceinline__ void kb_wait_eq(const uint32_t* flag, uint32_t value) {
  const unsigned long long t0 = kb_now_ns();
  while (kb_ld_acquire_sys(flag) != value) {
    if (kb_now_ns() - t0 > KB_SPIN_NS) {
      printf("kb: block %d thread %d waited more than 10 s for %p to become %u\n", blockIdx.x, threadIdx.x, flag,
             value);
      __trap();
    }
  }
}

// ---- host helpers (fixed) -----------------------------------------------------------------------------
static inline uint32_t kb_host_load_acquire(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void kb_host_store_release(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

// A bounded host wait: call ok() once per idle spin; it turns false once KB_WAIT_S seconds have
// passed since the KbDeadline was made (make a new one after progress).
struct KbDeadline {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  unsigned n = 0;
  bool ok() {
    if ((++n & 1023) != 0) return true;
    return std::chrono::steady_clock::now() - t0 < std::chrono::seconds(KB_WAIT_S);
  }
};

// What the kernel gets.
struct KbArgs {
  const float* table;                      // [rows][d], GPU memory
  float* y;                                // [m][d], GPU memory: y[j] answers item base + j
  KbRing* ring;                            // the ring, as the device sees it
  unsigned long long base;                 // job-wide number of this call's first item
  long long m;                             // items in this call
  int d;                                   // floats per row, a multiple of 4
};

// >>> EDIT helpers
// (optional) helpers for the kernel and kb_push
// <<< EDIT helpers

// The consumer: KB_BLOCKS blocks of KB_THREADS threads, running while the host pushes.
__global__ void __launch_bounds__(KB_THREADS) kb_consume_kernel(KbArgs a) {
  // >>> EDIT consume
  // TODO: take items a.base .. a.base + a.m - 1 out of a.ring (kb_wait_eq on ready, then hand the
  // slot back through done) and write y[j] = table[row] * mult.
  (void)a;
  // <<< EDIT consume
}

// The producer, on the host: hand items[0 .. m) ([m][2] int32: row, mult) to the kernel as items
// base .. base + m - 1. Returns 0, or -1 when a wait gave up.
static int kb_push(KbRing* ring, const int32_t* items, long long m, unsigned long long base) {
  // >>> EDIT push
  // TODO: put each item into its slot (waiting with a KbDeadline until the slot is free), then
  // publish it through ready.
  (void)ring; (void)items; (void)m; (void)base;
  return 0;
  // <<< EDIT push
}

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static char kb_error[256];
static KbRing* kb_ring_host;               // the ring as the host sees it
static KbRing* kb_ring_dev;                // ... and as the device sees it
static unsigned long long kb_next;         // items pushed so far in the job

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

// The ring: pinned, mapped into the device, zeroed.
extern "C" int kb_setup() {
  void* p = nullptr;
  KB_CHECK(cudaHostAlloc(&p, sizeof(KbRing), cudaHostAllocMapped));
  memset(p, 0, sizeof(KbRing));
  void* d = nullptr;
  KB_CHECK(cudaHostGetDevicePointer(&d, p, 0));
  kb_ring_host = (KbRing*)p;
  kb_ring_dev = (KbRing*)d;
  kb_next = 0;
  return 0;
}

// y[j] <- table[items[j][0]] * items[j][1] for j < m; items on the host, table and y on the device.
extern "C" int kb_h2d(const int32_t* items, long long m, const float* table, int d, float* y, cudaStream_t stream) {
  if (m < 1 || d < 4 || d % 4 != 0) {
    snprintf(kb_error, sizeof(kb_error), "bad shape: %lld items, d = %d (a multiple of 4)", m, d);
    return -1;
  }
  KbArgs a;
  a.table = table;
  a.y = y;
  a.ring = kb_ring_dev;
  a.base = kb_next;
  a.m = m;
  a.d = d;
  kb_consume_kernel<<<KB_BLOCKS, KB_THREADS, 0, stream>>>(a);
  KB_CHECK(cudaGetLastError());
  kb_next += (unsigned long long)m;
  if (kb_push(kb_ring_host, items, m, a.base) != 0) {
    snprintf(kb_error, sizeof(kb_error), "kb_push: no progress for %d s (the kernel took no item)", KB_WAIT_S);
    return -1;
  }
  return 0;
}
