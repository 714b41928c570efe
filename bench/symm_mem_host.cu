//! Host-side launch helpers shared by the four shipped symm_mem solutions (inside each
//! one's _CUDA_SRC string, after its own kernel). Edit here, then run python bench/gen_symm_mem.py.
// ---- host-side launch helpers (no torch headers in this file: fast nvcc) ----
template <int V, int NS>
static cudaError_t kb_launch_t(const KbParams& p, int grid, int threads, cudaStream_t st) {
  kb_kernel<V, NS><<<grid, threads, 0, st>>>(p);
  return cudaGetLastError();
}

int kb_launch(int vec, int ns8, int grid, int threads, const void* x, void* out,
              const long long* data, const long long* flags, long long n, int rank,
              int world, int algo, int fence, int nchunk, long long timeout_ns, unsigned int epoch,
              void* stream) {
  KbParams p;
  p.x = x;
  p.out = out;
  for (int r = 0; r < KB_MAXW; ++r) {
    p.data[r] = r < world ? reinterpret_cast<void*>(data[r]) : nullptr;
    p.flags[r] = r < world ? reinterpret_cast<uint32_t*>(flags[r]) : nullptr;
  }
  p.n = n;
  p.timeout_ns = timeout_ns;
  p.rank = rank;
  p.world = world;
  p.algo = algo;
  p.fence = fence;
  p.nchunk = nchunk;
  p.epoch = epoch;
  cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
  cudaError_t e;
  const int wsel = ns8 ? 8 : world;   // ns8: dev switch, run the 8-rank kernel at any W
  if (vec == 8) {
    if (wsel <= 2) e = kb_launch_t<8, 2>(p, grid, threads, st);
    else if (wsel <= 4) e = kb_launch_t<8, 4>(p, grid, threads, st);
    else e = kb_launch_t<8, 8>(p, grid, threads, st);
  } else {
    if (wsel <= 2) e = kb_launch_t<1, 2>(p, grid, threads, st);
    else if (wsel <= 4) e = kb_launch_t<1, 4>(p, grid, threads, st);
    else e = kb_launch_t<1, 8>(p, grid, threads, st);
  }
  return (int)e;
}

template <int V, int NS>
static int kb_occ(int threads) {
  int nb = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kb_kernel<V, NS>, threads, 0) != cudaSuccess) return -1;
  return nb;
}

// blocks of `threads` threads that are resident at once on the current device
// (the smaller of the V=1 and V=8 kernels), capped at KB_MAXB
int kb_max_blocks(int world, int threads) {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return -1;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return -1;
  int a, b;
  if (world <= 2) { a = kb_occ<8, 2>(threads); b = kb_occ<1, 2>(threads); }
  else if (world <= 4) { a = kb_occ<8, 4>(threads); b = kb_occ<1, 4>(threads); }
  else { a = kb_occ<8, 8>(threads); b = kb_occ<1, 8>(threads); }
  int occ = a < b ? a : b;
  if (occ <= 0) return -1;
  long long m = (long long)occ * sms;
  return (int)(m < KB_MAXB ? m : KB_MAXB);
}

int kb_sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return -1;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return -1;
  return sms;
}

const char* kb_err_str(int e) { return cudaGetErrorString((cudaError_t)e); }

