#!/usr/bin/env bash
# Issue 21 (and 23's primitives example) on ONE GPU: the checker / candidate-process split with
# CUDA, NCCL at W = 1, symmetric memory and load_inline under the hardened candidate process.
#   bash bench/gpu_split.sh smoke      a few items, small size, short timing: does the split run?
#   bash bench/gpu_split.sh evidence   the self-check of every W = 1-capable problem (W = 1 copies
#                                      of references that run alone) at sizes >= 1 MiB, the harness
#                                      cost per item, the shipped kernels, the primitives example
#   bash bench/gpu_split.sh sets       one input set per timed call: the self-check and harness cost,
#                                      and the shipped kernels' speedups beside the earlier protocol
#                                      (sets met again in a window, KB_DEV_SET_REUSE=1) on this machine
#   bash bench/gpu_split.sh reuse      the self-check and harness cost of the earlier protocol
#   bash bench/gpu_split.sh pair       launch-bound problems at small and medium under four variants
#                                      (sets met again or one a call; a round's two windows apart or
#                                      back to back, KB_DEV_PAIR=1): the rounds' spread, cost, speedups
# Reports land in $OUT; the table (kernelbench spread / overhead) is printed last.
source "$(dirname "$0")/gpu_common.sh"
R=/tmp/kb-21; mkdir -p $R
what=${1:-smoke}
machine
python3 -c "from pytest_kernelbench.rank.sandbox import landlock_abi, expected_layers; print('landlock ABI', landlock_abi(), expected_layers())"

w1_copies() {   # the problems valid at W = 1, plus W = 1 copies of problems whose references run alone
  rm -rf "$1"
  w1_copy "$1" $(python3 - <<'PY'
import pathlib, yaml
names = ["collective/all_reduce", "collective/all_gather", "collective/reduce_scatter", "collective/all_to_all",
         "collective/broadcast", "utility/grad_clip_inplace", "utility/sharded_rmsnorm",
         "utility/vocab_parallel_cross_entropy", "utility/zero1_adam_step", "fusion/allreduce_residual_rmsnorm",
         "fusion/gemm_allreduce", "fusion/allgather_gemm"]
for y in sorted(pathlib.Path("problems").glob("*/*/problem.yaml")):
    d = yaml.safe_load(y.read_text())
    rel = f"{y.parent.parent.name}/{y.parent.name}"
    if rel in names or (1 in d.get("world_sizes", []) and "cuda" in d.get("devices", [])):
        print(rel)
PY
)
  echo "$(ls -d "$1"/*/* | wc -l) problems at W = 1"
}

# a load_inline candidate for all_reduce at W = 1 (the sum over one rank is a copy)
load_inline_candidate() {
  mkdir -p "$1/collective"
  cat > "$1/collective/all_reduce.py" <<'PY'
import torch
from torch.utils.cpp_extension import load_inline

_src = r"""
#include <torch/extension.h>
#include <cuda_bf16.h>
__global__ void copy_kernel(const __nv_bfloat16* x, __nv_bfloat16* y, long n) {
  long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
  for (; i < n; i += (long)gridDim.x * blockDim.x) y[i] = x[i];
}
torch::Tensor copy(torch::Tensor x) {
  auto y = torch::empty_like(x);
  long n = x.numel();
  copy_kernel<<<264, 512, 0, at::cuda::getCurrentCUDAStream()>>>(
      (const __nv_bfloat16*)x.data_ptr(), (__nv_bfloat16*)y.data_ptr(), n);
  return y;
}
"""
_ext = load_inline("kb_w1_copy", cpp_sources="torch::Tensor copy(torch::Tensor x);", cuda_sources=_src,
                   functions=["copy"], extra_cuda_cflags=["-O3"], verbose=False)

def solution(x):
    return _ext.copy(x)      # W = 1: the sum over ranks is x itself
PY
  sed -i 's/#include <cuda_bf16.h>/#include <cuda_bf16.h>\n#include <ATen\/cuda\/CUDAContext.h>/' "$1/collective/all_reduce.py"
}

keep_logs() {   # what the job folders of items that did not pass said (their logs), for $OUT
  tar czf "$OUT/$1-jobs.tgz" -C /tmp/kb-21 --wildcards '*/jobs/*/logs' '*/jobs/*/hb' 2>/dev/null || true
}

smoke() {
  w1_copies $R/w1
  log "self-check, small, short timing"
  timeout -k 10 -s INT 240 $PT $R/w1/collective/all_reduce $R/w1/utility/grad_clip_inplace \
    --kb-candidate=reference --kb-compile-timeout=90 --kb-sizes=small --kb-timing-rounds=6 --kb-timeout=60 --kb-report=$R/smoke-ref.json 2>&1 | tail -25
  log "shipped symm_mem kernels (load_inline + symmetric memory at W = 1)"
  timeout -k 10 -s INT 200 $PT $R/w1/collective/all_reduce $R/w1/collective/all_gather --kb-candidate=shipped \
    --kb-sizes=small --kb-timing-rounds=6 --kb-timeout=60 --kb-report=$R/smoke-shipped.json 2>&1 | tail -12
  log "a load_inline candidate from a folder"
  load_inline_candidate $R/sol
  timeout -k 10 -s INT 200 $PT $R/w1/collective/all_reduce --kb-solutions=$R/sol --kb-sizes=small \
    --kb-timing-rounds=6 --kb-timeout=120 --kb-report=$R/smoke-inline.json 2>&1 | tail -8
  cp $R/smoke-*.json "$OUT/" 2>/dev/null
  keep_logs smoke
}

evidence() {
  w1_copies $R/w1
  log "self-check of the W = 1 set, sizes >= 1 MiB (fork launcher)"
  timeout -k 10 -s INT "${KB_RUN_S:-330}" $PT $R/w1 --kb-candidate=reference --kb-report=$R/selfcheck.json \
    2>&1 | grep -E "^(FAILED|ERROR)|passed|failed|error: |mismatch: |crash: |timeout: " | cut -c1-300 | tail -20
  cp $R/selfcheck.json "$OUT/" 2>/dev/null
  if [ -f bench/primitives_example.py ]; then
    log "primitives example (issue 23)"
    timeout -k 10 -s INT 90 python3 bench/primitives_example.py --out "$OUT" 2>&1 | tail -6
  fi
  log "shipped kernels and a load_inline candidate"
  timeout -k 10 -s INT "${KB_SHIPPED_S:-100}" $PT $R/w1/collective/all_reduce $R/w1/collective/all_gather \
    --kb-candidate=shipped --kb-sizes=small,medium --kb-report=$R/shipped.json 2>&1 | tail -4
  cp $R/shipped.json "$OUT/" 2>/dev/null
  load_inline_candidate $R/sol
  timeout -k 10 -s INT 90 $PT $R/w1/collective/all_reduce --kb-solutions=$R/sol --kb-sizes=small,medium \
    --kb-report=$R/inline.json 2>&1 | tail -4
  cp $R/inline.json "$OUT/" 2>/dev/null
  log tables
  KB="python3 -m pytest_kernelbench.cli"
  $KB spread $R/selfcheck.json | tail -12
  $KB overhead $R/selfcheck.json | tail -3
}

selfcheck() {   # selfcheck NAME: the W = 1 set against itself into $OUT/NAME-selfcheck.json, and its tables
  w1_copies $R/w1
  log "self-check of the W = 1 set, sizes >= 1 MiB (fork launcher), $1"
  timeout -k 10 -s INT "${KB_RUN_S:-330}" $PT $R/w1 --kb-candidate=reference --kb-report=$R/$1-selfcheck.json \
    2>&1 | grep -E "^(FAILED|ERROR)|passed|failed|error: |mismatch: |crash: |timeout: " | cut -c1-300 | tail -20
  cp $R/$1-selfcheck.json "$OUT/" 2>/dev/null
}

shipped_ab() {   # the shipped kernels' speedups under both protocols, one after the other
  for variant in sets reuse; do
    log "shipped kernels, $variant"
    KB_DEV_SET_REUSE=$([ $variant = reuse ] && echo 1 || echo 0) timeout -k 10 -s INT "${KB_SHIPPED_S:-100}" \
      $PT $R/w1/collective/all_reduce $R/w1/collective/all_gather --kb-candidate=shipped --kb-sizes=small,medium \
      --kb-report=$R/$variant-shipped.json 2>&1 | tail -3
    cp $R/$variant-shipped.json "$OUT/" 2>/dev/null
  done
}

tables() {   # tables NAME
  KB="python3 -m pytest_kernelbench.cli"
  log "tables, $1"
  $KB spread $R/$1-selfcheck.json | tail -12
  $KB overhead $R/$1-selfcheck.json | tail -3
}

pair() {
  w1_copies $R/w1
  local names="collective/all_reduce collective/all_gather collective/all_to_all collective/broadcast
    collective/reduce_scatter utility/sharded_rmsnorm utility/grad_clip_inplace utility/vectorized_copy_widths"
  for variant in reuse reuse-pair sets sets-pair; do
    local reuse=0 pair=0
    case $variant in reuse*) reuse=1 ;; esac
    case $variant in *pair) pair=1 ;; esac
    log "self-check, $variant"
    KB_DEV_SET_REUSE=$reuse KB_DEV_PAIR=$pair timeout -k 10 -s INT 150 $PT $(for n in $names; do echo $R/w1/$n; done) \
      --kb-candidate=reference --kb-sizes=small,medium --kb-report=$R/$variant-pair-selfcheck.json 2>&1 | tail -1
    log "shipped kernels, $variant"
    KB_DEV_SET_REUSE=$reuse KB_DEV_PAIR=$pair timeout -k 10 -s INT 100 $PT $R/w1/collective/all_reduce \
      $R/w1/collective/all_gather --kb-candidate=shipped --kb-sizes=small,medium \
      --kb-report=$R/$variant-pair-shipped.json 2>&1 | tail -1
    cp $R/$variant-pair-*.json "$OUT/" 2>/dev/null
  done
  for variant in reuse reuse-pair sets sets-pair; do
    python3 -m pytest_kernelbench.cli overhead $R/$variant-pair-selfcheck.json | tail -1 | sed "s/^/$variant /"
  done
}

case "$what" in
  smoke) smoke ;;
  evidence) evidence ;;
  sets) selfcheck sets; shipped_ab; keep_logs sets; tables sets ;;
  reuse) KB_DEV_SET_REUSE=1 selfcheck reuse; keep_logs reuse; tables reuse ;;
  pair) pair ;;
  *) echo "usage: gpu_split.sh smoke | evidence | sets | reuse | pair"; exit 2 ;;
esac
log done
