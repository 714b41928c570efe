#!/usr/bin/env bash
# Where the candidate side's time goes (one GPU): the self-check of a few W = 1 copies with the
# checker's wait, the pinning, the environment watcher and the in-process guards switched one at a
# time; each size's window split into its parts (timing.window_us: go, calls, sync, epilogue, seen).
#   bash bench/split_knobs.sh [variant ...]    (default: all below)
# Dev knobs (environment, read by the rank side): KB_DEV_CHECKER_SLEEP=1 (the checker sleeps for
# "done" instead of spinning), KB_DEV_NO_PIN=1, KB_DEV_NO_WATCH=1, KB_DEV_NO_GUARDS=1, and
# KB_DEV_PROFILE=<dir> (each checker's cProfile stats there: where the harness's own time goes).
source "$(dirname "$0")/gpu_common.sh"
mkdir -p /tmp/kn
log cpus; nproc; lscpu | grep -E "^(Thread|Core|Socket|Model name)" ; cat /sys/devices/system/cpu/cpu{0,1,2,15}/topology/thread_siblings_list 2>/dev/null | tr '\n' ' '; echo
w1_copy /tmp/kn/w1 collective/all_reduce collective/all_to_all utility/grad_clip_inplace
VARIANTS=("$@")
[ ${#VARIANTS[@]} -eq 0 ] && VARIANTS=("as-is" "KB_DEV_CHECKER_SLEEP=1" "KB_DEV_NO_PIN=1" "KB_DEV_NO_WATCH=1,KB_DEV_NO_GUARDS=1"
                                       "KB_DEV_CHECKER_SLEEP=1,KB_DEV_NO_WATCH=1,KB_DEV_NO_GUARDS=1" "as-is")
n=0
for v in "${VARIANTS[@]}"; do
  n=$((n + 1)); rep=/tmp/kn/$n.json
  log "variant $v"
  with_knobs "$v" timeout 200 $PT /tmp/kn/w1 --kb-candidate=reference \
     --kb-timing-rounds=8 --kb-report=$rep 2>&1 | tail -1
  cp $rep "$OUT/knobs-$n.json" 2>/dev/null
  python3 - "$v" $rep <<'PY'
import json, sys
d = json.load(open(sys.argv[2]))
for i in d["items"]:
    for s in i.get("sizes", []):
        t = s.get("timing") or {}
        if not t:
            continue
        w = t.get("window_us", {})
        cell = lambda side: " ".join(f"{k}={v:.0f}" for k, v in w.get(side, {}).items())
        print(f"{sys.argv[1][:40]:40s} {i['problem'][-14:]:14s} {s['name']:6s} x{s.get('speedup') or 0:.3f} "
              f"ref {t['reference']['median_s']*1e6:8.1f} cand {t['candidate']['median_s']*1e6:8.1f} us/call "
              f"n={t['reference']['iters']:4d} | R {cell('reference')} | C {cell('candidate')}")
PY
done
log done
