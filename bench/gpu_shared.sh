#!/usr/bin/env bash
# Multi-GPU correctness on one GPU (--kb-oversubscribe, docs/one-gpu.md): the suite's self-check and
# shipped solutions at W = 2, then W = 4 while the budget lasts, every item with its ranks sharing
# the GPU (gloo, never timed). Each run writes its JSON report (and JSONL) to $OUT; the table
# problem x W x {self-check, shipped} (outcome, or the skip reason) is printed last; the peer-memory
# red team (tests/cheats/test_gpu_shared_cheats.py) runs after the W = 2 self-check.
#   KB_BUDGET_S (default 450): the whole script's seconds; a run cut short keeps its JSONL, and the
#   table reads it. KB_SIZES (default tiny): the sizes to check (empty: every GPU size).
#   KB_STEPS (default "2:reference cheats 2:shipped 4:reference 4:shipped"): which runs, in order.
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
cheats() {   # the peer-memory red team at W = 2 on the shared GPU (tests/cheats/test_gpu_shared_cheats.py)
  local left=$(( BUDGET - (SECONDS - START) - 20 ))
  if [ "$left" -lt 60 ]; then log "skip red team: budget spent"; return; fi
  log "red team W=2 (${left}s left)"
  timeout -k 10 "$left" $PT -rA tests/cheats/test_gpu_shared_cheats.py \
    2>&1 | tail -12 | tee "$OUT/shared-cheats.txt"
}
for step in ${KB_STEPS:-2:reference cheats 2:shipped 4:reference 4:shipped}; do
  if [ "$step" = cheats ]; then cheats; else run "${step%%:*}" "${step#*:}"; fi
done
log table; python3 bench/shared_table.py "$OUT"/shared-w*-*.json* | tee "$OUT/shared-table.md"
log done
