#!/usr/bin/env bash
# How many adaptive rounds the self-check needs, and how widely a round's ratio spreads, with the
# window's length and the collector switched (one GPU, W = 1 copies, default adaptive rounds).
#   bash bench/split_rounds.sh [variant ...]
source "$(dirname "$0")/gpu_common.sh"
w1_copy /tmp/kr/w1 collective/all_reduce collective/all_to_all utility/mbarrier_pipeline
VARIANTS=("$@")
[ ${#VARIANTS[@]} -eq 0 ] && VARIANTS=("as-is" "KB_DEV_GC_ON=1" "KB_DEV_ROUND_S=0.05" "KB_DEV_CHECKER_SLEEP=1")
n=0
for v in "${VARIANTS[@]}"; do
  n=$((n + 1)); rep=/tmp/kr/$n.json
  with_knobs "$v" timeout 200 $PT /tmp/kr/w1 --kb-candidate=reference \
     --kb-report=$rep > /dev/null 2>&1
  cp $rep "$OUT/rounds-$n.json" 2>/dev/null
  python3 - "$v" $rep <<'PY'
import json, statistics, sys
sys.path.insert(0, ".")
from pytest_kernelbench.cli import overhead
d = json.load(open(sys.argv[2]))
for i in d["items"]:
    for s in i.get("sizes", []):
        t = s.get("timing") or {}
        if not t:
            continue
        r = [a / b for a, b in zip(t["reference"]["rounds_s"], t["candidate"]["rounds_s"])]
        q = statistics.quantiles(r, n=10)
        print(f"{sys.argv[1][:28]:28s} {i['problem'][-14:]:14s} {s['name']:6s} x{s['speedup']:.3f} rounds {len(r):2d} "
              f"p10-p90 {q[0]:.2f}-{q[-1]:.2f} timing {s['timing_s']:.1f}s")
m = overhead.medians(d)
print(f"{sys.argv[1][:28]:28s} MEDIAN wall {m['wall_s']:.2f} overhead {m['overhead_s']:.2f} timing {m['timing_s']:.2f} timed {m['timed_s']:.2f}")
PY
done
