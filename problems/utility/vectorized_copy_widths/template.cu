// Widening copy with 128-bit accesses on misaligned rows (problems/utility/vectorized_copy_widths).
// y[r, j] = float(x[r, j + 1]): x is bfloat16 [rows, cols] with cols odd, y float32 [rows, cols - 1].
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

// >>> EDIT helpers
// (optional) helpers for the kernel
// <<< EDIT helpers

// x: [rows][cols] bfloat16, y: [rows][cols - 1] float32, both contiguous and 16-byte aligned.
__global__ void kb_widen_kernel(const __nv_bfloat16* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  // >>> EDIT kernel
  // TODO: y[r][j] = x[r][j + 1] as float32, with wide loads and stores where aligned.
  (void)x; (void)y; (void)rows; (void)cols;
  // <<< EDIT kernel
}

// Launch kb_widen_kernel (or your own kernels) on `stream`.
static void kb_launch(const __nv_bfloat16* x, float* y, int rows, int cols, cudaStream_t stream) {
  // >>> EDIT launch
  // TODO: launch the kernel on `stream`.
  (void)x; (void)y; (void)rows; (void)cols; (void)stream;
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

// y <- x[:, 1:] as float32, on `stream`.
extern "C" int kb_widen(const void* x, void* y, int rows, int cols, cudaStream_t stream) {
  if (rows < 1 || cols < 2) {
    snprintf(kb_error, sizeof(kb_error), "bad shape [%d, %d]", rows, cols);
    return -1;
  }
  kb_launch((const __nv_bfloat16*)x, (float*)y, rows, cols, stream);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) snprintf(kb_error, sizeof(kb_error), "launch: %s", cudaGetErrorString(e));
  return (int)e;
}
