#!/usr/bin/env bash
# Issue 48 on one GPU (~5 min): the developer's numbers of the shipped symm_mem collectives at
# W = 1 (copies of all_reduce, all_gather, reduce_scatter, all_to_all with world_sizes [1]: a
# degenerate world, no peer, so a check of the path and of the reference's timing, never of W >= 2
# speed; busbw at W = 1 is 0 by nccl-tests' factors), swept 8 KiB .. 256 MiB with --kb-per-size;
# the plots of `kernelbench plots`; and the all_reduce reference timed by a plain loop of the same
# torch call the nccl-tests way (bench/plain_sweep.py: CUDA events, warm-up, max over ranks) in the
# same run. The last lines printed are the table: the harness's reference time per size vs the
# plain loop's, within 5 %?
#   bash bench/gpu_devnums.sh            (KB_SWEEP=8K:256M:2, KB_DEVNUMS_S=300 to change)
source "$(dirname "$0")/gpu_common.sh"
R=/tmp/kb-devnums; rm -rf $R; mkdir -p $R
SWEEP=${KB_SWEEP:-8K:256M:2}
machine
w1_copy $R/problems collective/all_reduce collective/all_gather collective/reduce_scatter collective/all_to_all

log "sweep $SWEEP: shipped symm_mem kernels at W = 1, per-size view"
timeout -k 10 -s INT "${KB_DEVNUMS_S:-300}" $PT $R/problems --kb-candidate=shipped --kb-sweep=$SWEEP \
  --kb-per-size --kb-timeout=240 --kb-report=$R/sweep.json 2>&1 | tail -90
cp $R/sweep.json "$OUT/devnums-sweep.json" 2>/dev/null

log "plots"
python3 -m pytest_kernelbench.cli plots $R/sweep.json --png "$OUT/devnums-plots" 2>&1 | tail -8

log "plain loop of the all_reduce reference, the nccl-tests way"
timeout -k 10 120 python3 -m torch.distributed.run --standalone --nproc-per-node 1 bench/plain_sweep.py \
  $R/problems/collective/all_reduce $SWEEP $R/plain.json 2>&1 | grep -v '^{' | tail -5
cp $R/plain.json "$OUT/devnums-plain.json" 2>/dev/null

log table
python3 - <<'PY'
import json, pathlib
R = pathlib.Path("/tmp/kb-devnums")
try:
    doc, plain = json.loads((R / "sweep.json").read_text()), json.loads((R / "plain.json").read_text())
except (OSError, ValueError) as e:
    raise SystemExit(f"no table: {e}")
item = next((i for i in doc["items"] if i["problem"] == "collective/all_reduce"), None)
if not item or item.get("outcome") != "passed":
    raise SystemExit(f"no table: all_reduce {item and item.get('outcome')}: {item and item.get('message')}")
harness = {s["name"]: s["timing"]["reference"]["median_s"] for s in item["sizes"] if s.get("timing")}
print(f"{'size':>6} {'harness ref us':>15} {'plain us':>10} {'ratio':>7} {'fresh us':>10} {'ratio':>7}  within 5 %")
ok = 0
for p in plain["sizes"]:
    h = harness.get(p["name"])
    if h is None:
        continue
    r1, r2 = h / p["plain_s"], h / p["fresh_s"]
    good = abs(r2 - 1) <= 0.05 or abs(r1 - 1) <= 0.05
    ok += good
    print(f"{p['name']:>6} {h * 1e6:15.1f} {p['plain_s'] * 1e6:10.1f} {r1:7.3f} {p['fresh_s'] * 1e6:10.1f} {r2:7.3f}  "
          f"{'yes' if good else 'NO'}")
print(f"{ok}/{len(plain['sizes'])} sizes within 5 % of a plain loop (plain: one buffer, as nccl-tests; "
      "fresh: input sets over 2 x L2, L2 flushed, as the harness)")
PY
log done
