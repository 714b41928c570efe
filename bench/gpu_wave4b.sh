#!/usr/bin/env bash
# Wave 4's second GPU call (one GPU, KB_BUDGET_S seconds in all, default 540), most important first:
#   1. issues 46/49: W = 2 ranks sharing the GPU, the shipped solutions: the Python ones first (the
#      symm_mem solutions that need the job's shared TMPDIR, the new ones of issue 49), then the
#      native ones while its share lasts (KB_SHIPPED_S, default 200; the JSONL keeps what finished);
#   2. issue 46: the peer-memory red team at W = 2 (tests/cheats/test_gpu_shared_cheats.py);
#   3. issue 48: the baselines per backend at W = 1 (bench/gpu_baselines_w1.sh);
#   4. issue 46: the self-check of the whole suite at W = 2, with what is left;
# then the table problem x {self-check, shipped} (bench/shared_table.py), last.
source "$(dirname "$0")/gpu_common.sh"
BUDGET=${KB_BUDGET_S:-540}; START=$SECONDS
left() { echo $(( BUDGET - (SECONDS - START) - 20 )); }
machine
py=$(grep -l '^solutions:' problems/*/*/problem.yaml | xargs -n1 dirname)
native=$(ls -d problems/*/*/ | while read d; do [ -f "$d/solution.cu" ] && echo "${d%/}"; done)
s1=${KB_SHIPPED_S:-200}; [ "$(left)" -lt "$s1" ] && s1=$(left)
log "1. shared GPU, W = 2, shipped (${s1}s)"
timeout -k 10 -s INT "$s1" $PT $py $native --kb-oversubscribe --kb-nproc=2 --kb-candidate=shipped --kb-sizes=tiny \
  --kb-timeout=90 --kb-compile-timeout=150 --kb-report="$OUT/shared-w2-shipped.json" 2>&1 | tail -4
if [ "$(left)" -gt 60 ]; then
  log "2. red team W = 2"
  timeout -k 10 $(( $(left) < 150 ? $(left) : 150 )) $PT -rA tests/cheats/test_gpu_shared_cheats.py 2>&1 | tail -12 \
    | tee "$OUT/shared-cheats.txt"
fi
if [ "$(left)" -gt 60 ]; then
  log "3. baselines at W = 1"
  KB_BASE_S=$(( $(left) < 110 ? $(left) : 110 )) bash bench/gpu_baselines_w1.sh 2>&1 | tail -30
fi
if [ "$(left)" -gt 40 ]; then
  log "4. shared GPU, W = 2, self-check of the suite ($(left)s)"
  timeout -k 10 -s INT $(left) $PT problems --kb-oversubscribe --kb-nproc=2 --kb-candidate=reference --kb-sizes=tiny \
    --kb-timeout=90 --kb-compile-timeout=150 --kb-report="$OUT/shared-w2-reference.json" 2>&1 | tail -3
fi
rm -rf "$OUT"/shared-w2-*/          # job folders: too many files to come back
log table
python3 bench/shared_table.py "$OUT"/shared-w2-*.json* 2>&1 | tee "$OUT/shared-table.md" | tail -60
log done
