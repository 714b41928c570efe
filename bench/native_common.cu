//! The fixed helpers the native CUDA problems share (one source; bench/gen_native_common.py copies
//! each definition into every problems/*/*/*.cu file that defines it, and a test fails on drift).
//! Each file stays a self-contained program, and a model sees each helper as part of its template.
//! Only the definitions are shared: a file's comments, order and everything else are its own.
//! Not compiled by itself (it leans on the KB_SPIN_NS and kb_error of the file it is copied into).

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

__device__ __forceinline__ void kb_wait_geq(const uint32_t* flag, uint32_t value) {
  const unsigned long long t0 = kb_now_ns();
  while ((int32_t)(kb_ld_acquire(flag) - value) < 0) {
    if (kb_now_ns() - t0 > KB_SPIN_NS) {
      printf("kb: block %d waited more than 10 s for flag %p to reach %u\n", blockIdx.x, flag, value);
      __trap();
    }
  }
}

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
