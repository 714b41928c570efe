// Sum over a shared-memory segment (problems/collective/shm_segment_sum).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>

#define KB_WAIT_S 20      // a wait with no progress for this long gives up

// Write into y[0, n) the element-wise sum of the world vectors slots + q * stride.
static void kb_reduce(const float* slots, int64_t stride, int world, float* y, int64_t n) {
  // >>> EDIT reduce
  // TODO: y[i] = sum over q of slots[q * stride + i].
  (void)slots; (void)stride; (void)world; (void)y; (void)n;
  // <<< EDIT reduce
}

// ---- the interface the harness calls (fixed) ------------------------------------------------------
struct KbBarrier {
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> generation;
};

struct KbShared {
  KbBarrier barrier;
  alignas(64) float slots[1];     // [2][world][n_max]
};

static char kb_error[256];
static uint64_t kb_calls = 0;     // this process's calls: every rank makes the same number

// A reusable barrier (generation counter); 0, or -1 after KB_WAIT_S seconds without the round opening.
static int kb_barrier(KbBarrier* b, int world) {
  const uint32_t gen = b->generation.load(std::memory_order_acquire);
  if (b->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == (uint32_t)world) {
    b->arrived.store(0, std::memory_order_relaxed);
    b->generation.store(gen + 1, std::memory_order_release);
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned spins = 1; b->generation.load(std::memory_order_acquire) == gen; ++spins) {
    std::this_thread::yield();
    if ((spins & 255) == 0 && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(KB_WAIT_S)) return -1;
  }
  return 0;
}

extern "C" const char* kb_last_error() { return kb_error; }

extern "C" size_t kb_segment_bytes(int world, int64_t n_max) {
  return sizeof(KbShared) + sizeof(float) * 2 * (size_t)world * (size_t)n_max;
}

// Publish x, wait for every rank, reduce every rank's slot into y.
extern "C" int kb_all_reduce(void* segment, const float* x, float* y, int64_t n, int64_t n_max, int rank, int world) {
  KbShared* s = static_cast<KbShared*>(segment);
  float* slots = s->slots + (size_t)(kb_calls++ & 1) * world * n_max;
  memcpy(slots + rank * n_max, x, n * sizeof(float));
  if (kb_barrier(&s->barrier, world) != 0) {
    snprintf(kb_error, sizeof(kb_error), "rank %d: the barrier made no progress for %d s", rank, KB_WAIT_S);
    return -1;
  }
  kb_reduce(slots, n_max, world, y, n);
  return 0;
}
