#!/usr/bin/env bash
# Multi-GPU correctness on one GPU (--kb-oversubscribe, docs/one-gpu.md): the suite's self-check and
# shipped solutions at W = 2, then W = 4 while the budget lasts, every item with its ranks sharing
# the GPU (gloo, never timed). Each run writes its JSON report (and JSONL) to $OUT; the table
# problem x W x {self-check, shipped} (outcome, or the skip reason) is printed last.
#   KB_BUDGET_S (default 450): the whole script's seconds; a run cut short keeps its JSONL, and the
#   table reads it. KB_SIZES (default tiny): the sizes to check (empty: every GPU size).
source "$(dirname "$0")/gpu_common.sh"
BUDGET=${KB_BUDGET_S:-450}; START=$SECONDS
SIZES=${KB_SIZES-tiny}
machine
run() {   # run W MODE: one suite run, under what is left of the budget
  local w=$1 mode=$2 left=$(( BUDGET - (SECONDS - START) - 20 ))
  if [ "$left" -lt 30 ]; then log "skip W=$w $mode: budget spent"; return; fi
  log "W=$w $mode (${left}s left)"
  timeout -k 10 "$left" $PT problems --kb-oversubscribe --kb-nproc="$w" --kb-candidate="$mode" \
    ${SIZES:+--kb-sizes=$SIZES} --kb-timeout=120 --kb-compile-timeout=180 \
    --kb-report="$OUT/shared-w$w-$mode.json" 2>&1 | tail -4
}
run 2 reference; run 2 shipped; run 4 reference; run 4 shipped
log table; python3 bench/shared_table.py "$OUT"/shared-w*-*.json* | tee "$OUT/shared-table.md"
log done
