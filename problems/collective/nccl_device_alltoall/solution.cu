// All-to-all and reduce-scatter with NCCL's device API on a registered window
// (problems/collective/nccl_device_alltoall). The fixed part made an NCCL communicator, allocated one
// buffer per rank with ncclMemAlloc, registered it as a symmetric window and created a device
// communicator. A call stages x in this rank's part of the window, meets the other ranks at per-block
// flags kept in the window, and reads chunk `rank` of every rank's staged x through the window's
// load/store (LSA) pointers: as chunk q of y (the all-to-all) and into the sum z (the reduce-scatter).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KB_MAXW 8                               // most ranks
#define KB_MAXB 128                             // most blocks per launch
#define KB_FLAG_BYTES (KB_MAXB * KB_MAXW * 4)   // flags at offset 0 of the window
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

// What one call works on. The window has the same layout on every rank: flags [KB_MAXB][KB_MAXW]
// at offset 0 (all 0 at first), then two staging areas of the largest x that alternate by epoch
// parity. ncclGetLsaPointer(win, offset, q) is where byte `offset` of LSA rank q's window is mapped
// in this GPU (q = comm.lsaRank for this rank's own; here every rank is in the LSA team).
// x, y and the staging areas are W chunks of `cvecs` vectors each: chunk q of y is chunk `rank` of
// rank q's x; z (one chunk) is the sum over q of chunk `rank` of rank q's x.
struct KbArgs {
  ncclDevComm comm;            // the device communicator: comm.lsaRank, comm.lsaSize (= the world)
  ncclWindow_t win;            // the registered window
  const uint4* x;              // this rank's input: W * cvecs vectors of 8 bfloat16
  uint4* y;                    // out: the all-to-all, W * cvecs vectors
  uint4* z;                    // out: the reduce-scatter (sum over ranks of chunk `rank`), cvecs vectors
  size_t data_offset;          // window offset of this epoch's staging area
  long long cvecs;             // 16-byte vectors per chunk (the same on every rank)
  uint32_t epoch;              // 1, 2, 3, ...: the call number, the same on every rank
};
// The flag of rank r for block b, in the flags of any rank: word b * KB_MAXW + r, written by r only.

// Runs on every rank with the grid kb_launch_shape chose (the same everywhere, every call).
__global__ void kb_alltoall_rs_kernel(KbArgs a) {
  // >>> EDIT kernel
  // Block b owns the same slice [lo, hi) of every chunk on every rank, so its flags pair with block
  // b of the other ranks. It stages its slice of the chunks the peers need, raises its flag at every
  // rank, waits for theirs, then reads chunk r's slice of every rank once: stored as chunk q of y
  // and summed (fp32, rank order) into z. A staging area of this parity is written again two epochs
  // later, after the barrier of the epoch in between, which no rank reaches before its kernel of
  // this epoch (and so its reads) has ended.
  const int b = blockIdx.x, t = threadIdx.x;
  const int r = a.comm.lsaRank, w = a.comm.lsaSize;
  const long long per = (a.cvecs + gridDim.x - 1) / gridDim.x;
  const long long lo = min(a.cvecs, (long long)b * per), hi = min(a.cvecs, lo + per);
  uint4* mine = static_cast<uint4*>(ncclGetLsaPointer(a.win, a.data_offset, r));
  for (int q = 0; q < w; ++q) {
    if (q == r) continue;                         // our own chunk never leaves: read from x below
    const long long base = (long long)q * a.cvecs;
    for (long long i = lo + t; i < hi; i += blockDim.x) mine[base + i] = a.x[base + i];
  }
  __syncthreads();
  if (t < w && t != r) {
    uint32_t* theirs = static_cast<uint32_t*>(ncclGetLsaPointer(a.win, 0, t));
    const uint32_t* home = static_cast<const uint32_t*>(ncclGetLsaPointer(a.win, 0, r));
    __threadfence_system();                       // the staged slices before the flag
    kb_st_release(&theirs[b * KB_MAXW + r], a.epoch);
    kb_wait_geq(&home[b * KB_MAXW + t], a.epoch);
  }
  __syncthreads();
  const uint4* src[KB_MAXW];
#pragma unroll
  for (int q = 0; q < KB_MAXW; ++q)               // chunk r of rank q's staged x
    src[q] = q < w ? static_cast<const uint4*>(ncclGetLsaPointer(a.win, a.data_offset, q)) + (long long)r * a.cvecs
                   : nullptr;
  for (long long i = lo + t; i < hi; i += blockDim.x) {
    uint4 v[KB_MAXW];
#pragma unroll
    for (int q = 0; q < KB_MAXW; ++q)             // every load in flight before the stores and adds
      if (q < w) v[q] = q == r ? a.x[(long long)r * a.cvecs + i] : src[q][i];
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int q = 0; q < KB_MAXW; ++q) {           // LSA rank order
      if (q < w) {
        a.y[(long long)q * a.cvecs + i] = v[q];
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v[q]);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 f = __bfloat1622float2(h[k]);
          acc[2 * k] += f.x;
          acc[2 * k + 1] += f.y;
        }
      }
    }
    uint4 out;
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int k = 0; k < 4; ++k) o[k] = __floats2bfloat162_rn(acc[2 * k], acc[2 * k + 1]);
    a.z[i] = out;
  }
  // <<< EDIT kernel
}

// Blocks (at most KB_MAXB) and threads per block, chosen once at setup: every call of every size
// uses this grid, so block b's flags always pair with block b of the other ranks.
static void kb_launch_shape(int* blocks, int* threads) {
  // >>> EDIT launch
  // one block per SM at most (a block waiting at the barrier must not keep a peer's matching block
  // from running); 64 blocks of 512 threads pull from every peer at once
  *blocks = 64;
  *threads = 512;
  // <<< EDIT launch
}

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static char kb_error[256];
static ncclComm_t kb_comm;
static ncclDevComm kb_dev;
static ncclWindow_t kb_win;
static void* kb_buf;
static long long kb_data_bytes;   // bytes of one staging area (the largest x)
static uint32_t kb_epoch;
static int kb_blocks, kb_threads;

extern "C" const char* kb_last_error() { return kb_error; }

static int kb_cuda_fail(cudaError_t e, const char* what) {
  snprintf(kb_error, sizeof(kb_error), "%s: %s", what, cudaGetErrorString(e));
  return (int)e;
}
static int kb_nccl_fail(ncclResult_t r, const char* what) {
  snprintf(kb_error, sizeof(kb_error), "%s: %s", what, ncclGetErrorString(r));
  return 1000 + (int)r;
}
#define KB_CUDA(call)                                   \
  do {                                                  \
    cudaError_t e_ = (call);                            \
    if (e_ != cudaSuccess) return kb_cuda_fail(e_, #call); \
  } while (0)
#define KB_NCCL(call)                                   \
  do {                                                  \
    ncclResult_t r_ = (call);                           \
    if (r_ != ncclSuccess) return kb_nccl_fail(r_, #call); \
  } while (0)

extern "C" int kb_init(int device) {
  KB_CUDA(cudaSetDevice(device));
  return 0;
}

extern "C" int kb_unique_id_bytes() { return (int)sizeof(ncclUniqueId); }

// Rank 0 makes the id; the harness hands it to every rank.
extern "C" int kb_unique_id(void* out) {
  ncclUniqueId id;
  KB_NCCL(ncclGetUniqueId(&id));
  memcpy(out, &id, sizeof(id));
  return 0;
}

// Every rank at once (collective): the communicator, the zeroed buffer registered as a symmetric
// window, the device communicator, the grid.
extern "C" int kb_setup(const void* id_bytes, int rank, int world, long long data_bytes) {
  if (world < 1 || world > KB_MAXW || data_bytes % 16 != 0) {
    snprintf(kb_error, sizeof(kb_error), "world size %d (1..%d), data bytes %lld (a multiple of 16)", world,
             KB_MAXW, data_bytes);
    return -1;
  }
  ncclUniqueId id;
  memcpy(&id, id_bytes, sizeof(id));
  KB_NCCL(ncclCommInitRank(&kb_comm, world, id, rank));
  const size_t grain = (size_t)2 << 20;   // whole 2 MiB pages: the same symmetric size on every rank
  const size_t bytes = (KB_FLAG_BYTES + 2 * (size_t)data_bytes + grain - 1) / grain * grain;
  KB_NCCL(ncclMemAlloc(&kb_buf, bytes));
  KB_CUDA(cudaMemset(kb_buf, 0, bytes));
  KB_CUDA(cudaDeviceSynchronize());
  KB_NCCL(ncclCommWindowRegister(kb_comm, kb_buf, bytes, &kb_win, NCCL_WIN_COLL_SYMMETRIC));
#ifdef NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER   // NCCL >= 2.29: a versioned struct with its initializer
  ncclDevCommRequirements reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#else                                            // NCCL 2.28: a plain struct, zero means the defaults
  ncclDevCommRequirements reqs;
  memset(&reqs, 0, sizeof(reqs));
#endif
  reqs.lsaBarrierCount = KB_MAXB;    // NCCL's own LSA barriers, one per block, should a kernel want them
  KB_NCCL(ncclDevCommCreate(kb_comm, &reqs, &kb_dev));
  if (kb_dev.lsaSize != world) {
    snprintf(kb_error, sizeof(kb_error), "only %d of the %d ranks are load/store accessible", kb_dev.lsaSize, world);
    return -1;
  }
  kb_data_bytes = data_bytes;
  kb_epoch = 0;
  kb_blocks = 1;
  kb_threads = 32;
  kb_launch_shape(&kb_blocks, &kb_threads);
  if (kb_blocks < 1 || kb_blocks > KB_MAXB || kb_threads < 1 || kb_threads > 1024) {
    snprintf(kb_error, sizeof(kb_error), "kb_launch_shape chose %d blocks of %d threads (1..%d, 1..1024)",
             kb_blocks, kb_threads, KB_MAXB);
    return -1;
  }
  return 0;
}

// y <- the all-to-all of x, z <- the reduce-scatter (sum) of x (bfloat16); bytes of x a multiple of
// 16 * world, the same on every rank.
extern "C" int kb_alltoall_reduce_scatter(const void* x, void* y, void* z, long long bytes, cudaStream_t stream) {
  if (bytes % (16LL * kb_dev.lsaSize) != 0 || bytes > kb_data_bytes) {
    snprintf(kb_error, sizeof(kb_error), "bad size %lld (multiple of 16 x %d ranks, at most %lld)", bytes,
             kb_dev.lsaSize, kb_data_bytes);
    return -1;
  }
  KbArgs a;
  a.comm = kb_dev;
  a.win = kb_win;
  a.epoch = ++kb_epoch;
  a.data_offset = KB_FLAG_BYTES + (size_t)kb_data_bytes * (a.epoch & 1);
  a.x = (const uint4*)x;
  a.y = (uint4*)y;
  a.z = (uint4*)z;
  a.cvecs = bytes / 16 / kb_dev.lsaSize;
  kb_alltoall_rs_kernel<<<kb_blocks, kb_threads, 0, stream>>>(a);
  KB_CUDA(cudaGetLastError());
  return 0;
}
