#!/usr/bin/env bash
# Wave 4's third GPU call (short): the three self-checks the empty-output fix concerns at W = 2 on a
# shared GPU (collective/reduce, collective/gather_scatter, p2p/pp_stage_send_ipc), then the
# peer-memory red team at W = 2 (tests/cheats/test_gpu_shared_cheats.py), KB_CHEATS_S at most.
source "$(dirname "$0")/gpu_common.sh"
machine
log "self-check at W = 2, shared GPU"
timeout -k 10 -s INT 80 $PT problems/collective/reduce problems/collective/gather_scatter problems/p2p/pp_stage_send_ipc \
  --kb-oversubscribe --kb-nproc=2 --kb-candidate=reference --kb-sizes=tiny --kb-timeout=60 \
  --kb-report="$OUT/shared-w2-reference-fixed.json" 2>&1 | tail -3
rm -rf "$OUT"/shared-w2-reference-fixed/
log "red team W = 2"
timeout -k 10 "${KB_CHEATS_S:-140}" $PT -rA tests/cheats/test_gpu_shared_cheats.py 2>&1 | tail -14 | tee "$OUT/shared-cheats.txt"
log done
