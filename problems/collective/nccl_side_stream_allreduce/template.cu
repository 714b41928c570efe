// NCCL all-reduce on a side stream (problems/collective/nccl_side_stream_allreduce).
// The communicator, a side stream and two events are made once at setup; each call must run the
// all-reduce on the side stream, ordered after everything the caller queued before it on the
// caller's stream, and make the caller's stream wait for it, without ever blocking the host.
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

// ---- errors (fixed) ------------------------------------------------------------------------------------
static char kb_error[256];

extern "C" const char* kb_last_error() { return kb_error; }

static int kb_cuda_fail(cudaError_t e, const char* what) {
  snprintf(kb_error, sizeof(kb_error), "%s: %s", what, cudaGetErrorString(e));
  return (int)e;
}
static int kb_nccl_fail(ncclResult_t r, const char* what) {
  snprintf(kb_error, sizeof(kb_error), "%s: %s", what, ncclGetErrorString(r));
  return 1000 + (int)r;
}
// In a function returning int: return an error code (and say why) when the call fails.
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

// ---- state made once at setup (fixed) ----------------------------------------------------------------
static ncclComm_t kb_comm;        // every rank of the job, this rank at its rank
static cudaStream_t kb_side;      // a non-blocking stream of this process's device: the all-reduce runs here
static cudaEvent_t kb_ready;      // two events without timing, free for the ordering
static cudaEvent_t kb_done;

// y <- sum over ranks of x: count bfloat16 values (the same count on every rank, up to 134217728),
// x and y distinct device buffers. Called by every rank, the same number of times, with `stream`
// the caller's stream: x is complete only in the order of `stream`, and whatever the caller queues
// on `stream` after this call may read y. Return 0, or an error code after saying why.
extern "C" int kb_all_reduce(const void* x, void* y, long long count, cudaStream_t stream) {
  // >>> EDIT enqueue
  // TODO: order the side stream after `stream`, enqueue the NCCL all-reduce on it, order `stream`
  // after it; check every return code.
  (void)x; (void)y; (void)count; (void)stream;
  return 0;
  // <<< EDIT enqueue
}

// ---- the interface the harness calls for setup (fixed) ----------------------------------------------
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

// Every rank at once (collective): the communicator, the side stream and the events.
extern "C" int kb_setup(const void* id_bytes, int rank, int world) {
  ncclUniqueId id;
  memcpy(&id, id_bytes, sizeof(id));
  KB_NCCL(ncclCommInitRank(&kb_comm, world, id, rank));
  KB_CUDA(cudaStreamCreateWithFlags(&kb_side, cudaStreamNonBlocking));
  KB_CUDA(cudaEventCreateWithFlags(&kb_ready, cudaEventDisableTiming));
  KB_CUDA(cudaEventCreateWithFlags(&kb_done, cudaEventDisableTiming));
  return 0;
}

// After a failed call: abort the communicator (local, never waits for the peers), so that nothing
// of this rank stays queued behind an all-reduce that can no longer complete.
extern "C" int kb_abort() {
  if (kb_comm != nullptr) {
    ncclCommAbort(kb_comm);
    kb_comm = nullptr;
  }
  return 0;
}
