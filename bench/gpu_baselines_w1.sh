#!/usr/bin/env bash
# Issue 48's baselines per backend on ONE GPU: copies of the problems that declare baselines, valid at
# W = 1 (a degenerate world: the path of each baseline in the reference process, its check against
# the reference, its column in the per-size view; never a W >= 2 speed), the shipped solution against
# the reference and every baseline in the same rounds. Prints the per-size view last.
#   KB_BASE_S (default 120): the run's seconds; KB_BASE_SIZES (default small); KB_BASELINES (default: all
#   but symm_mem_two_shot, which torch does not implement at W = 1: "Not implemented for world_size=1").
source "$(dirname "$0")/gpu_common.sh"
R=/tmp/kb-base; rm -rf $R; mkdir -p $R
w1_copy $R/problems collective/all_reduce collective/all_gather collective/reduce_scatter collective/allreduce_decode
log "baselines at W = 1: shipped vs reference and every baseline, per size"
timeout -k 10 -s INT "${KB_BASE_S:-120}" $PT $R/problems --kb-candidate=shipped --kb-baselines="${KB_BASELINES:-ring,symm_mem_one_shot,symm_mem_copy_engine}" --kb-per-size \
  --kb-sizes="${KB_BASE_SIZES:-small}" --kb-timeout=120 --kb-report=$R/base.json 2>&1 | tail -40
cp $R/base.json "$OUT/baselines-w1.json" 2>/dev/null
log done
