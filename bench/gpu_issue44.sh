#!/usr/bin/env bash
# Issue 44 on ONE GPU, in one call: the hardened split for real.
#   1. the multicast switches sealed in a CUDA candidate process (bench/gpu_sealenv.sh: shipped
#      all_reduce at W = 1, `sealed-env` in its records, a CUDA process seen sealed from outside);
#   2. the self-check of a W = 1 subset in turn with this tree and an older one ($KB_AB_OLD: a folder
#      holding `git archive REV pytest_kernelbench bench problems conftest.py pyproject.toml`), this
#      tree first: each item's sizes >= 1 MiB within 1.00 +- 0.03, and the median harness cost per
#      item of each tree on the same machine (bench/selfcheck_summary.py prints the table last).
# (The candidate identity's own probe is bench/identity_probe.py, run before this on the same tree.)
source "$(dirname "$0")/gpu_common.sh"
R=/tmp/kb-44; rm -rf $R; mkdir -p $R
ITEMS=${KB_ITEMS:-"collective/all_reduce collective/all_gather collective/reduce_scatter utility/grad_clip_inplace utility/sharded_rmsnorm fusion/gemm_allreduce utility/zero1_adam_step"}
machine
log "1. sealed environment"
timeout -k 5 120 bash bench/gpu_sealenv.sh 2>&1 | tail -12
log "2. self-check A/B on: $ITEMS"
n=0
for side in new old; do
  n=$((n + 1)); dir=$PWD; [ $side = old ] && dir=$(cd "$KB_AB_OLD" && pwd)
  rm -rf $R/w1; (cd "$dir" && w1_copy $R/w1 $ITEMS)
  (cd "$dir" && PYTHONPATH=$dir timeout -k 10 -s INT "${KB_RUN_S:-200}" $PT $R/w1 --kb-candidate=reference \
    --kb-report=$R/sc-$side.json 2>&1 | grep -E "^(FAILED|ERROR)|passed|failed" | tail -3)
  cp $R/sc-$side.json "$OUT/ab-$n-$side.json" 2>/dev/null
  grep -o '"isolation": \[[^]]*\]' $R/sc-$side.jsonl | sort | uniq -c | head -2
  grep -o '"lookahead": {[^}]*}' $R/sc-$side.json | grep -c '"capped": true' | sed 's/^/sizes capped by the lookahead bound: /'
done
log tables
python3 bench/selfcheck_summary.py "$OUT/ab-1-new.json=new" "$OUT/ab-2-old.json=old" 2>&1 | tail -30
