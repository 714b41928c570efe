#!/usr/bin/env bash
# Issue 21 (and 23's primitives example) on ONE GPU: the checker / candidate-process split with
# CUDA, NCCL at W = 1, symmetric memory and load_inline under the hardened candidate process.
#   bash bench/gpu_split.sh smoke      a few items, small size, short timing: does the split run?
#   bash bench/gpu_split.sh profile    three items with KB_DEV_MARKS timelines and the checkers' cProfile
#   bash bench/gpu_split.sh selfcheck  the self-check alone (a repeat of evidence's first part)
#   bash bench/gpu_split.sh late       work on a side stream the caller's stream never waits for, at W = 1:
#                                      timed (the candidate process synchronizes the whole device before
#                                      "done") or failed, never free; a late write after the trials fails;
#                                      outputs a hidden thread finishes after "done" (queued copies) fail;
#                                      a kernel a second CUDA context leaves spinning from "done" until the
#                                      candidate's next window (linger) fails; a joined control passes
#   bash bench/gpu_split.sh lingergemm the linger candidate on gemm_allreduce at W = 1, whose reference is compute-bound
#   bash bench/gpu_split.sh hostmem    the solver processes' host allocator (rank/hostmem.py): fresh processes
#                                      with glibc's default thresholds and with the fixed ones, then
#                                      device_to_host_fifo's self-check at medium and large, each way
#   bash bench/gpu_split.sh guards     what the forbidden-API guards cost a call through them (bench/guard_cost.py),
#                                      then the shipped kernels (forbid lists on) against the guard-free
#                                      reference process
#   bash bench/gpu_split.sh order      the first-of-the-pair effect: seven items at small and large, each
#                                      size's paired ratio in rounds the reference opened and in rounds
#                                      the candidate opened (a window right after the checker's restore
#                                      pass ran slower: rank/slots.py)
#   bash bench/gpu_split.sh procstat   two self-check runs with bench/procstat_probe.py beside them: each
#                                      solver process's context switches, faults, CPU time, huge pages
#                                      and threads, joined with how much slower the reference issued calls
#   bash bench/gpu_split.sh roundlen   the self-check run several times on one machine, with the window's
#                                      length and the least rounds as dev knobs (KB_ROUNDLEN: variants,
#                                      with_knobs syntax; KB_ITEMS: only these W = 1 items, e.g.
#                                      "collective/all_reduce utility/zero1_adam_step"): the median cost
#                                      per item, its rounds, the sizes >= 1 MiB within 1.00 +- 0.03 and
#                                      the share of slow windows, one line a run
#                                      (a variant with KB_CHURN=1 runs bench/prestart_churn.py beside it)
#   bash bench/gpu_split.sh jitter     each vCPU's stalls of a busy thread (bench/cpu_jitter.py) before and
#                                      after roundlen's self-check (KB_ROUNDLEN, KB_ITEMS)
#   bash bench/gpu_split.sh ab         the self-check in turn with this tree and an older one (KB_AB_OLD: a folder
#                                      holding `git archive REV`; KB_AB_PAIRS: how many pairs, 2), this
#                                      tree first, then the summary of every run (one machine: ratios hold)
#   bash bench/gpu_split.sh memory     each process's GPU memory (bench/gpu_memory_probe.py) through the self-check
#                                      of vocab_parallel_cross_entropy and all_gather (KB_ITEMS: other W = 1 items)
#   bash bench/gpu_split.sh evidence   the self-check of every W = 1-capable problem (W = 1 copies
#                                      of references that run alone) at sizes >= 1 MiB, the harness
#                                      cost per item, the shipped kernels, the primitives example
# Reports land in $OUT; the table (kernelbench spread / overhead) is printed last.
# (The timing-protocol variants of reports/baselines/2026-11-26-h100x1-{sets,variants}-* ran with
# this script's `sets` and `pair` modes at commit 940f1b9, whose dev knobs they needed.)
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

run_selfcheck() {   # the self-check of the W = 1 set into $R/selfcheck.json (and $OUT)
  w1_copies $R/w1
  log "self-check of the W = 1 set, sizes >= 1 MiB (fork launcher)"
  timeout -k 10 -s INT "${KB_RUN_S:-330}" $PT $R/w1 --kb-candidate=reference --kb-report=$R/selfcheck.json \
    2>&1 | grep -E "^(FAILED|ERROR)|passed|failed|error: |mismatch: |crash: |timeout: " | cut -c1-300 | tail -20
  cp $R/selfcheck.json "$OUT/" 2>/dev/null
}

selfcheck_tables() {
  python3 -m pytest_kernelbench.cli spread $R/selfcheck.json | tail -12
  python3 -m pytest_kernelbench.cli overhead $R/selfcheck.json | tail -3
}

selfcheck() {   # the self-check alone (a repeat of evidence's first part) and its tables
  run_selfcheck
  selfcheck_tables
}

evidence() {
  run_selfcheck
  if [ -f bench/primitives_example.py ]; then
    log "primitives example (issue 23)"
    timeout -k 10 -s INT 150 python3 bench/primitives_example.py --out "$OUT" 2>&1 | tail -6
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
  selfcheck_tables
}

memory() {   # each process's GPU memory through a self-check of a few W = 1 items
  w1_copies $R/w1 >/dev/null
  local items=$(for i in ${KB_ITEMS:-utility/vocab_parallel_cross_entropy collective/all_gather}; do echo $R/w1/$i; done)
  python3 bench/gpu_memory_probe.py --out "$OUT/memory.json" -- -p pytest_kernelbench.plugin -p no:cacheprovider -q \
    $items --kb-candidate=reference --kb-report=$R/memory-run.json 2>&1 | tail -12
  cp $R/memory-run.json "$OUT/" 2>/dev/null
}

roundlen() {   # the self-check once per variant of the timing knobs, on one machine (see the usage above)
  w1_copies $R/w1
  local n=0 v items=$R/w1
  [ -n "${KB_ITEMS:-}" ] && items=$(for i in $KB_ITEMS; do echo $R/w1/$i; done)
  for v in ${KB_ROUNDLEN:-as-is KB_DEV_ROUND_S=0.01,KB_DEV_MIN_ROUNDS=12 as-is KB_DEV_ROUND_S=0.01,KB_DEV_MIN_ROUNDS=12}; do
    n=$((n + 1))
    log "self-check $n: $v"
    local churn=""
    case "$v" in *KB_CHURN=1*)     # the next job's setup stood in for beside this run (bench/prestart_churn.py)
      python3 bench/prestart_churn.py > $R/churn-$n.log 2>&1 & churn=$! ;; esac
    with_knobs "$v" timeout -k 10 -s INT "${KB_RUN_S:-330}" $PT $items --kb-candidate=reference \
      --kb-report=$R/roundlen-$n.json 2>&1 | tail -1
    if [ -n "$churn" ]; then kill $churn; wait $churn; grep -c "^member" $R/churn-$n.log; tail -2 $R/churn-$n.log; fi
    cp $R/roundlen-$n.json "$OUT/" 2>/dev/null
    echo "$v" > "$OUT/roundlen-$n.variant"
  done
  log tables
  python3 bench/selfcheck_summary.py $(for i in $(seq 1 $n); do echo "$R/roundlen-$i.json=$(cat $OUT/roundlen-$i.variant)"; done)
  rm -f "$OUT"/roundlen-*.variant
}

ab() {   # the self-check in turn with this tree and $KB_AB_OLD's, KB_AB_PAIRS times
  local n=0 i side dir
  [ -f bench/exact_values_cost.py ] && python3 bench/exact_values_cost.py 2>&1 | tail -4
  for i in $(seq 1 "${KB_AB_PAIRS:-2}"); do
    for side in new old; do
      n=$((n + 1)); dir=$PWD; [ $side = old ] && dir=$(cd "$KB_AB_OLD" && pwd)
      rm -rf $R; mkdir -p $R; w1_copies $R/w1 >/dev/null
      log "self-check $n: $side"
      (cd "$dir" && PYTHONPATH=$dir timeout -k 10 -s INT "${KB_RUN_S:-330}" $PT $R/w1 --kb-candidate=reference \
        --kb-report=$R/sc.json 2>&1 | tail -1)
      cp $R/sc.json "$OUT/ab-$n-$side.json" 2>/dev/null
    done
  done
  log tables
  python3 bench/selfcheck_summary.py $(for f in "$OUT"/ab-*.json; do b=$(basename $f .json); echo "$f=${b#ab-}"; done)
}

jitter() {   # each vCPU's stalls of a busy thread (bench/cpu_jitter.py) before and after roundlen's self-check
  python3 bench/cpu_jitter.py --out "$OUT/jitter-before.json"
  roundlen
  python3 bench/cpu_jitter.py --out "$OUT/jitter-after.json"
}

procstat() {   # the solver processes' /proc figures beside two self-check runs (bench/procstat_probe.py)
  w1_copies $R/w1
  for i in 1 2; do
    rm -rf $R/ps$i; mkdir -p $R/ps$i
    python3 bench/procstat_probe.py $R/ps$i/sc/jobs $R/ps$i/samples.jsonl & local probe=$!
    timeout -k 10 -s INT "${KB_RUN_S:-330}" $PT $R/w1 --kb-candidate=reference --kb-report=$R/ps$i/sc.json 2>&1 | tail -1
    sleep 1; kill $probe
    cp $R/ps$i/sc.json "$OUT/procstat-$i.json"; cp $R/ps$i/samples.jsonl "$OUT/procstat-$i.jsonl"
    python3 bench/procstat_probe.py --join $R/ps$i/samples.jsonl $R/ps$i/sc.json
  done
}

profile() {   # where a job's time goes: KB_DEV_MARKS timelines and the checkers' cProfile, a few items
  w1_copies $R/w1
  mkdir -p $R/marks $R/prof
  log "self-check of three items with marks and profiles"
  KB_DEV_MARKS=$R/marks KB_DEV_PROFILE=$R/prof timeout -k 10 -s INT 200 $PT $R/w1/collective/all_gather \
    $R/w1/utility/sharded_rmsnorm $R/w1/fusion/gemm_allreduce --kb-candidate=reference --kb-keep-jobs \
    --kb-report=$R/profile.json 2>&1 | tail -3
  cp $R/profile.json "$OUT/" 2>/dev/null
  tar czf "$OUT/profile-marks.tgz" -C $R marks prof profile 2>/dev/null
  python3 bench/job_timeline.py $R > "$OUT/profile-timeline.txt" 2>&1
  python3 - $R/prof > "$OUT/profile-pstats.txt" 2>&1 <<'PY'
import pstats, sys, pathlib
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.prof")):
    print("====", f.name)
    s = pstats.Stats(str(f)); s.sort_stats("cumulative").print_stats("pytest_kernelbench", 60)
    s.sort_stats("tottime").print_stats(30)
PY
  tail -40 "$OUT/profile-timeline.txt"
  python3 -m pytest_kernelbench.cli overhead $R/profile.json | tail -5
}

late_candidates() {   # late_candidates DIR: five all_reduce candidates at W = 1 (the sum over one rank is x)
  for name in unjoined late_zero joined hidden_fill linger; do mkdir -p "$1/$name/collective"; done
  cp tests/cheats/gpu_linger.py "$1/linger/collective/all_reduce.py"
  cat > "$1/hidden_fill/collective/all_reduce.py" <<'PY'
import _thread, time
import torch
_late = []                      # (returned output, its answer) of the window that just ran
_last = [0.0, 0]                # when the last call returned; calls so far in its window
def _filler():                  # a thread the threading module never sees
    while True:
        time.sleep(0.00005)
        if _late and time.perf_counter() - _last[0] > 0.0002:      # the window's calls are over
            outs, answers = zip(*_late)
            _late.clear()
            torch._foreach_copy_(list(outs), list(answers))         # queued kernels: run after "done"
_thread.start_new_thread(_filler, ())
def solution(x):
    if time.perf_counter() - _last[0] > 0.001:
        _last[1] = 0
    _last[1] += 1
    out = x.clone()
    if _last[1] > 24:           # only in the rounds' windows (longer than the warm-up and the probes)
        out = torch.zeros_like(x)
        _late.append((out, x))
    _last[0] = time.perf_counter()
    return out
PY
  cat > "$1/unjoined/collective/all_reduce.py" <<'PY'
import torch
_side = []
def solution(x):                        # the copy runs on a side stream the caller's stream never waits for
    if not _side:
        _side.append(torch.cuda.Stream())
    out = torch.empty_like(x)
    _side[0].wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side[0]):
        torch.cuda._sleep(20_000_000)
        out.copy_(x)
    return out
PY
  cat > "$1/late_zero/collective/all_reduce.py" <<'PY'
import torch
_side, _calls = [], [0]
def solution(x):                        # right at "done", then zeroed by work left behind (after the trials)
    if not _side:
        _side.append(torch.cuda.Stream())
    _calls[0] += 1
    out = x.clone()
    if _calls[0] > 8:
        _side[0].wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(_side[0]):
            torch.cuda._sleep(2_000_000)
            out.zero_()
    return out
PY
  sed -e 's/# the copy runs on a side stream the caller.s stream never waits for/# joined: correct/' \
      -e 's/^    return out$/    torch.cuda.current_stream().wait_stream(_side[0]); out.record_stream(torch.cuda.current_stream()); return out/' \
      "$1/unjoined/collective/all_reduce.py" > "$1/joined/collective/all_reduce.py"
}

late() {
  w1_copy $R/late/w1 collective/all_reduce
  late_candidates $R/late
  for name in ${KB_LATE:-joined unjoined late_zero hidden_fill linger}; do
    log "late work: $name"
    rm -f $R/late-$name.json*
    timeout -k 10 -s INT 150 $PT $R/late/w1 --kb-solutions=$R/late/$name --kb-sizes=small,medium \
      --kb-report=$R/late-$name.json 2>&1 | grep -E "passed|failed|mismatch|runtime_error" | cut -c1-400 | tail -3
    cp $R/late-$name.json "$OUT/" 2>/dev/null
  done
}

lingergemm() {   # the linger cheat on a compute-bound reference: gemm_allreduce at W = 1 (the all-reduce is the identity)
  w1_copy $R/lg/w1 fusion/gemm_allreduce
  mkdir -p $R/lg/sol/fusion
  sed -e 's/^def solution(x):$/def solution(x, w):/' -e 's/^    out = x.clone()$/    out = torch.matmul(x, w)/' \
      -e 's/s\["n"\] = max(s\["n"\], s\["calls"\])/s["n"] = s["calls"]/' \
      -e 's/and s\["n"\] > 24:/and s["n"] >= 8:/' tests/cheats/gpu_linger.py > $R/lg/sol/fusion/gemm_allreduce.py
  grep -c 'torch.matmul(x, w)\|s\["n"\] = s\["calls"\]\|s\["n"\] >= 8' $R/lg/sol/fusion/gemm_allreduce.py
  rm -f $R/lingergemm.json*
  timeout -k 10 -s INT 200 $PT $R/lg/w1 --kb-solutions=$R/lg/sol --kb-sizes=small,medium --kb-report=$R/lingergemm.json \
    2>&1 | grep -E "passed|failed|mismatch|runtime_error" | cut -c1-400 | tail -3
  cp $R/lingergemm.json "$OUT/" 2>/dev/null
}

hostmem() {   # the solver processes' host allocator: the probe, then device_to_host_fifo (large) self-checks
  python3 bench/host_alloc_probe.py --procs 8
  [ -d $R/w1/utility/device_to_host_fifo ] || w1_copies $R/w1
  for n in 1 2 3; do
    for v in KB_DEV_MALLOC_DEFAULT=1 as-is; do
      rep=$R/d2h-$n-${v%%=*}.json
      with_knobs "$v" timeout -k 10 -s INT 120 $PT $R/w1/utility/device_to_host_fifo --kb-candidate=reference \
        --kb-sizes=medium,large --kb-report=$rep > /dev/null 2>&1
      cp $rep "$OUT/" 2>/dev/null
      python3 - "$v" $rep <<'PY'
import json, sys
for s in json.load(open(sys.argv[2]))["items"][0]["sizes"]:
    t = s["timing"]
    print(f"{sys.argv[1]:24s} {s['name']:6s} x{s['speedup']:.3f} band {s['band'][0]:.3f}-{s['band'][1]:.3f} "
          f"ref {t['reference']['median_s'] * 1e3:.3f} ms cand {t['candidate']['median_s'] * 1e3:.3f} ms")
PY
    done
  done
}

guards() {
  log "the guards' cost per call (NCCL, W = 1)"
  python3 bench/guard_cost.py
  w1_copies $R/w1
  log "shipped symm_mem kernels, forbid lists on, small and medium"
  timeout -k 10 -s INT 240 $PT $R/w1/collective/all_reduce $R/w1/collective/all_gather --kb-candidate=shipped \
    --kb-sizes=small,medium --kb-timeout=90 --kb-report=$R/guards-shipped.json 2>&1 | tail -6
  cp $R/guards-shipped.json "$OUT/" 2>/dev/null
  python3 - $R/guards-shipped.json <<'PY'
import json, sys
for it in json.load(open(sys.argv[1]))["items"]:
    for s in it.get("sizes") or []:
        t = s.get("timing") or {}
        if t.get("reference"):
            print(f"{it['problem']:24s} {s['name']:6s} {it['outcome']} x{s['speedup']:.3f} "
                  f"ref {t['reference']['median_s'] * 1e6:.1f} us cand {t['candidate']['median_s'] * 1e6:.1f} us")
PY
}

order() {
  w1_copies $R/w1
  log "the order of a round's windows (self-check, small and large)"
  rm -f $R/order.json*         # a report's JSONL left by an earlier call would be resumed
  local sel=""
  for p in collective/all_reduce collective/reduce_scatter collective/all_to_all utility/tma_bulk_copy_pipeline \
           utility/mbarrier_pipeline fusion/gemm_allreduce utility/grad_clip_inplace; do sel="$sel $R/w1/$p"; done
  timeout -k 10 -s INT 280 $PT $sel --kb-candidate=reference --kb-sizes=small,large --kb-timeout=120 \
    --kb-report=$R/order.json 2>&1 | tail -2
  cp $R/order.json "$OUT/" 2>/dev/null
  python3 - $R/order.json <<'PY'
import json, statistics, sys
for it in json.load(open(sys.argv[1]))["items"]:
    for s in it.get("sizes") or []:
        t = s.get("timing") or {}
        r = [a / b for a, b in zip(t["reference"]["rounds_s"], t["candidate"]["rounds_s"])]
        print(f"{it['problem']:32s} {s['name']:6s} x{s['speedup']:.3f} reference first {statistics.median(r[0::2]):.3f} "
              f"candidate first {statistics.median(r[1::2]):.3f} rounds {len(r)}")
PY
}

case "$what" in
  order) order ;;
  guards) guards ;;
  late) late ;;
  lingergemm) lingergemm ;;
  hostmem) hostmem ;;
  smoke) smoke ;;
  profile) profile ;;
  selfcheck) selfcheck ;;
  evidence) evidence ;;
  ab) ab ;;
  procstat) procstat ;;
  jitter) jitter ;;
  roundlen) roundlen ;;
  memory) memory ;;
  *) echo "usage: gpu_split.sh smoke | profile | selfcheck | evidence | late | lingergemm | hostmem | guards | order | procstat | roundlen | memory"; exit 2 ;;
esac
log done
