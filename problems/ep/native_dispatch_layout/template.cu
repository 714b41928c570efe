// MoE dispatch layout (problems/ep/native_dispatch_layout): the counts and the token-to-rank mask an
// expert-parallel dispatch needs, computed on one GPU from one rank's top-k routing. Experts are
// split evenly and contiguously over `ranks` ranks: expert e lives on rank e / (experts / ranks).
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#define KB_MAXE 1024   // most experts
#define KB_MAXR 8      // most ranks
#define KB_MAXK 16     // most experts per token

// What one call works on (every pointer on this GPU).
struct KbArgs {
  const int64_t* topk_ids;       // [tokens, topk]: row t holds the experts of token t, distinct, or -1 (an unused slot)
  int* num_tokens_per_rank;      // [ranks] out: tokens with at least one expert on rank r
  int* num_tokens_per_expert;    // [experts] out: tokens that chose expert e
  bool* is_token_in_rank;        // [tokens, ranks] out: token t has at least one expert on rank r
  int tokens, topk, experts, ranks;
};

// >>> EDIT helpers
// TODO: the kernel(s) of the layout.
// <<< EDIT helpers

// Launch the work of one call on `stream` (kernels of the helpers region, cudaMemsetAsync, ...);
// return the first error (cudaGetLastError() after the launches). Nothing here may synchronize.
static cudaError_t kb_launch(const KbArgs& a, cudaStream_t stream) {
  // >>> EDIT launch
  // TODO: zero what needs zeroing and launch the kernel(s) on `stream`.
  (void)a;
  (void)stream;
  return cudaSuccess;
  // <<< EDIT launch
}

// ---- the interface the harness calls (fixed) ---------------------------------------------------------
static char kb_error[256];

extern "C" const char* kb_last_error() { return kb_error; }

extern "C" int kb_init(int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) snprintf(kb_error, sizeof(kb_error), "cudaSetDevice: %s", cudaGetErrorString(e));
  return (int)e;
}

// The layout of `tokens` tokens routed to `topk` experts each among `experts` experts split over
// `ranks` ranks (experts a multiple of ranks), on `stream`.
extern "C" int kb_dispatch_layout(const int64_t* topk_ids, int* num_tokens_per_rank, int* num_tokens_per_expert,
                                  bool* is_token_in_rank, int tokens, int topk, int experts, int ranks,
                                  cudaStream_t stream) {
  if (tokens < 1 || topk < 1 || topk > KB_MAXK || ranks < 1 || ranks > KB_MAXR || experts < ranks ||
      experts > KB_MAXE || experts % ranks != 0) {
    snprintf(kb_error, sizeof(kb_error), "bad shape: tokens=%d topk=%d (1..%d) experts=%d (a multiple of ranks, "
             "at most %d) ranks=%d (1..%d)", tokens, topk, KB_MAXK, experts, KB_MAXE, ranks, KB_MAXR);
    return -1;
  }
  KbArgs a;
  a.topk_ids = topk_ids;
  a.num_tokens_per_rank = num_tokens_per_rank;
  a.num_tokens_per_expert = num_tokens_per_expert;
  a.is_token_in_rank = is_token_in_rank;
  a.tokens = tokens;
  a.topk = topk;
  a.experts = experts;
  a.ranks = ranks;
  cudaError_t e = kb_launch(a, stream);
  if (e != cudaSuccess) {
    snprintf(kb_error, sizeof(kb_error), "kb_launch: %s", cudaGetErrorString(e));
    return (int)e;
  }
  return 0;
}
