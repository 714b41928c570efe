#!/usr/bin/env bash
# One device call's worth of GPU work; everything it produces lands in $OUT (at most 8 files).
#   bash bench/gpu_run.sh core    calibration, 14 problems (reference), shipped collective kernels
#   bash bench/gpu_run.sh core2   14 problems (reference), -n 2 on disjoint GPUs, timing fidelity
#   bash bench/gpu_run.sh cheats  the GPU-only cheat tests
#   bash bench/gpu_run.sh extra   -n 2 on disjoint GPUs, timing fidelity, GPU cheat tests
#   bash bench/gpu_run.sh suite NAME [pytest args]   reference as candidate; stops itself before the
#        device's 600 s cap and still hands back NAME.json/.jsonl, so a later call can --kb-resume
source "$(dirname "$0")/gpu_common.sh"
R=/tmp/kb-reports; mkdir -p $R
keep_jobs() { tar czf "$OUT/jobs-$1.tgz" -C $R "$(basename "$2" .json)/jobs" 2>/dev/null || true; }
case "${1:-core}" in
core)
  machine
  log calibrate; python3 -m pytest_kernelbench.metrics.calibrate --json "$OUT/calibration.json"
  log reference; $PT problems --kb-candidate=reference --kb-report=$R/h200x4-reference.json 2>&1 | tail -45
  cp $R/h200x4-reference.json "$OUT/"; keep_jobs ref $R/h200x4-reference.json
  log shipped; $PT problems -m collective --kb-candidate=shipped --kb-report=$R/h200x4-shipped.json 2>&1 | tail -30
  cp $R/h200x4-shipped.json "$OUT/"; keep_jobs shipped $R/h200x4-shipped.json
  python3 -m pytest_kernelbench.cli overhead $R/h200x4-reference.json --md "$OUT/harness_bench.md" | tail -16
  ;;
core2)
  log reference; $PT problems --kb-candidate=reference --kb-report=$R/h200x4-reference.json 2>&1 | tail -40
  cp $R/h200x4-reference.json "$OUT/"; keep_jobs ref $R/h200x4-reference.json
  python3 -m pytest_kernelbench.cli overhead $R/h200x4-reference.json --md "$OUT/harness_bench.md" | tail -16
  log n2; $PT -n 2 problems -m collective --kb-nproc=2 --kb-report=$R/h200x4-n2-collective.json 2>&1 | tail -22
  cp $R/h200x4-n2-collective.json "$OUT/"
  log fidelity; python3 -m pytest_kernelbench.cli fidelity $R/fid --runs 5 2>&1 | tail -12; cp $R/fid/fidelity.json "$OUT/"
  ;;
cheats)
  log cheats; $PT tests/cheats -k gpu 2>&1 | tail -30
  ;;
final)
  log fidelity; python3 -m pytest_kernelbench.cli fidelity $R/fid --runs 3 2>&1 | tail -8; cp $R/fid/fidelity.json "$OUT/"
  log shipped; $PT problems -m collective --kb-candidate=shipped --kb-report=$R/h200x4-shipped.json 2>&1 | tail -14
  cp $R/h200x4-shipped.json "$OUT/"
  log cheats; $PT tests/cheats -k gpu --basetemp=$R/cheats 2>&1 | tail -12
  tar czf "$OUT/gpu-cheats-reports.tgz" $(find $R/cheats -maxdepth 2 -name 'report*.json*') 2>/dev/null
  ;;
extra)
  log n2; $PT -n 2 problems -m collective --kb-nproc=2 --kb-report=$R/h200x4-n2-collective.json 2>&1 | tail -25
  cp $R/h200x4-n2-collective.json "$OUT/"; keep_jobs n2 $R/h200x4-n2-collective.json
  log cheats; $PT tests/cheats -k gpu 2>&1 | tail -15
  log fidelity; python3 -m pytest_kernelbench.cli fidelity $R/fid --runs 5 2>&1 | tail -12; cp $R/fid/fidelity.json "$OUT/"
  ;;
suite)
  name=$2; shift 2
  log "suite $name: $*"; nvidia-smi -L
  timeout -k 15 -s INT "${KB_SUITE_S:-540}" $PT --kb-candidate=reference --kb-report=$R/$name.json "$@" 2>&1 | tail -70
  cp $R/$name.json $R/$name.jsonl "$OUT/" 2>/dev/null; keep_jobs "$name" $R/$name.json
  ;;
esac
log done
