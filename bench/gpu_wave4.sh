#!/usr/bin/env bash
# Wave 4 on ONE GPU in one budgeted call, most important first (each step runs under what is left of
# KB_BUDGET_S, default 520 s; a step that would not fit is skipped and says so):
#   1. issue 44: the candidate identity on CUDA (bench/identity_probe.py: CUDA, IPC, NCCL at W = 1,
#      symmetric memory, load_inline, Triton in a process hardened as the candidate's);
#   2. issue 44: the sealed environment in a CUDA process, seen from outside (bench/gpu_sealenv.sh);
#   3. issue 44: the W = 1 self-check, this tree then $KB_AB_OLD (an older tree: `git archive REV
#      pytest_kernelbench bench problems conftest.py pyproject.toml`), KB_AB_S seconds each;
#   4. issues 46/49: W = 2 ranks sharing the GPU (--kb-oversubscribe), self-check at the tiny size of
#      KB_SHARED (default: the problems new in issue 49 and the staged point-to-point ones), then
#      their shipped solutions;
# then the tables: the self-check summary (bench/selfcheck_summary.py) and the shared-GPU table
# (bench/shared_table.py), last.
source "$(dirname "$0")/gpu_common.sh"
BUDGET=${KB_BUDGET_S:-520}; START=$SECONDS
left() { echo $(( BUDGET - (SECONDS - START) - 15 )); }
fits() {   # fits NEED WHAT: is there room for a step of NEED seconds?
  if [ "$(left)" -lt "$1" ]; then log "skip $2: $(left)s left, needs $1"; return 1; fi
}
R=/tmp/kb-w4; rm -rf $R; mkdir -p $R
machine
if fits 60 "identity probe"; then
  log "1. identity probe"
  timeout -k 5 $(( $(left) < 150 ? $(left) : 150 )) python3 bench/identity_probe.py > "$OUT/identity-probe.txt" 2>&1
  tail -22 "$OUT/identity-probe.txt"
fi
if fits 60 "sealed env"; then
  log "2. sealed environment"
  timeout -k 5 90 bash bench/gpu_sealenv.sh > "$OUT/sealenv.txt" 2>&1; tail -8 "$OUT/sealenv.txt"
fi
ITEMS=${KB_ITEMS:-"collective/all_reduce collective/all_gather utility/grad_clip_inplace fusion/gemm_allreduce"}
AB_S=${KB_AB_S:-90}
for side in new old; do
  [ -n "${KB_AB_OLD:-}" ] || { [ $side = old ] && continue; }
  fits $(( AB_S + 10 )) "self-check ($side)" || continue
  log "3. self-check W = 1 ($side): $ITEMS"
  dir=$PWD; [ $side = old ] && dir=$(cd "$KB_AB_OLD" && pwd)
  rm -rf $R/w1; (cd "$dir" && w1_copy $R/w1 $ITEMS)
  (cd "$dir" && PYTHONPATH=$dir timeout -k 10 -s INT "$AB_S" $PT $R/w1 --kb-candidate=reference \
    --kb-report="$OUT/ab-$side.json" 2>&1 | grep -E "passed|failed" | tail -1)
done
SHARED=${KB_SHARED:-"problems/collective/allreduce_decode problems/collective/all_gather_v_reduce_scatter_v problems/fusion/decode_gemv_allreduce problems/utility/hsdp_grad_sync problems/ep/moe_agrs_dispatch_combine problems/ep/moe_dispatch_fp8 problems/ep/torchrec_kjt_alltoall problems/p2p/zigzag_ring_attention_backward problems/collective/usp_attention problems/p2p/linear_attn_cp_state_scan problems/fusion/sp_mlp_block problems/utility/distributed_muon problems/collective/dtensor_redistribute problems/utility/distributed_fft_pencil problems/p2p/rl_weight_reshard problems/p2p/kv_transfer_disagg problems/ep/dropless_dispatch_atomics problems/p2p/ring_send_recv problems/p2p/tensor_dict_send_recv problems/fusion/ring_attention problems/p2p/ipc_peer_copy"}
existing=$(for p in $SHARED; do [ -d "$p" ] && echo "$p"; done)
for mode in reference shipped; do
  fits 40 "shared W = 2 $mode" || continue
  log "4. shared GPU, W = 2, $mode ($(left)s left)"
  timeout -k 10 -s INT $(left) $PT $existing --kb-oversubscribe --kb-nproc=2 --kb-candidate=$mode --kb-sizes=tiny \
    --kb-timeout=90 --kb-compile-timeout=150 --kb-report="$OUT/shared-w2-$mode.json" 2>&1 | tail -3
done
log tables
[ -f "$OUT/ab-new.json" ] && python3 bench/selfcheck_summary.py "$OUT/ab-new.json=new" \
  $( [ -f "$OUT/ab-old.json" ] && echo "$OUT/ab-old.json=old" ) 2>&1 | tail -12
ls "$OUT"/shared-w2-*.json* >/dev/null 2>&1 && python3 bench/shared_table.py "$OUT"/shared-w2-*.json* 2>&1 | tail -40
log done
