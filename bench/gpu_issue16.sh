#!/usr/bin/env bash
# Issue 16 on whatever GPUs the machine has (W = every GPU it has; one GPU: W = 1 copies):
#   1. the device ping-pong behind the roofline's latency term (one GPU: two streams on it, a
#      smoke test of the kernel, not a link; two or more: GPU 0 <-> GPU 1 over NVLink)
#   2. three self-check runs (reference vs itself) of the suite with the fork launcher and one
#      with torchrun: the per-size spread, the per-phase overhead of each launcher, the roofline
#      with its latency term per problem
# Reports land in $OUT; the last lines printed are the tables.
#   bash bench/gpu_issue16.sh
source "$(dirname "$0")/gpu_common.sh"
R=/tmp/kb-16; rm -rf $R; mkdir -p $R
machine
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")

log "ping-pong latency"
python3 - <<'PY' | tee $R/pingpong.txt
import torch
from pytest_kernelbench.calibrate import pingpong_latency
n = torch.cuda.device_count()
d0 = torch.device("cuda", 0)
print(f"one GPU, two streams (not a link): {pingpong_latency(torch, d0, d0, iters=20000) * 1e6:.3f} us one-way")
if n > 1:
    torch.ones(1, device=d0).copy_(torch.ones(1, device="cuda:1"))   # peer access both ways
    torch.ones(1, device="cuda:1").copy_(torch.ones(1, device=d0))
    print(f"GPU 0 <-> GPU 1 over NVLink: {pingpong_latency(torch, d0, torch.device('cuda', 1)) * 1e6:.3f} us one-way")
PY

SEL="problems"
if [ "$NGPU" = 1 ]; then
  # one GPU: the problems valid at W = 1, plus W = 1 copies of problems whose references run
  # alone (a degenerate world: this measures the harness and the timing, not communication)
  python3 - <<'PY'
import pathlib, shutil, yaml
dst = pathlib.Path("/tmp/kb-16/w1")
names = ["collective/all_reduce", "collective/all_gather", "collective/reduce_scatter", "collective/all_to_all",
         "collective/broadcast", "utility/grad_clip_inplace", "utility/sharded_rmsnorm",
         "utility/vocab_parallel_cross_entropy", "utility/zero1_adam_step", "utility/grad_accum_loss_average",
         "fusion/allreduce_residual_rmsnorm", "fusion/gemm_allreduce", "fusion/allgather_gemm"]
for y in sorted(pathlib.Path("problems").glob("*/*/problem.yaml")):
    d = yaml.safe_load(y.read_text())
    rel = f"{y.parent.parent.name}/{y.parent.name}"
    if rel in names or (1 in d.get("world_sizes", []) and "cuda" in d.get("devices", [])):
        out = dst / rel
        shutil.copytree(y.parent, out, ignore=shutil.ignore_patterns("__pycache__"))
        d["world_sizes"] = [1]
        (out / "problem.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
print(len(list(dst.glob("*/*/problem.yaml"))), "problems at W = 1")
PY
  SEL=/tmp/kb-16/w1
fi

for run in 1 2 3; do
  log "self-check run $run (fork)"
  timeout -k 10 -s INT "${KB_RUN_S:-120}" $PT $SEL --kb-candidate=reference --kb-launcher=fork \
    --kb-report=$R/selfcheck-fork-$run.json 2>&1 | tail -4
done
log "self-check run (torchrun)"
timeout -k 10 -s INT "${KB_RUN_S:-120}" $PT $SEL --kb-candidate=reference --kb-launcher=torchrun \
  --kb-report=$R/selfcheck-torchrun.json 2>&1 | tail -4
cp $R/selfcheck-*.json $R/pingpong.txt "$OUT/" 2>/dev/null

log tables
KB="python3 -m pytest_kernelbench.cli"
$KB spread $R/selfcheck-fork-1.json $R/selfcheck-fork-2.json $R/selfcheck-fork-3.json --md $OUT/spread.md | tail -8
python3 - <<'PY' | tee $OUT/overhead-and-roofline.md
import json, pathlib
from pytest_kernelbench.cli import overhead
R = pathlib.Path("/tmp/kb-16")
print("| launcher | items | " + " | ".join(f"median {k}" for k in ("wall_s", "launch_s", "setup_s", "correctness_s",
                                                                      "timing_s", "timed_s", "overhead_s")) + " |")
print("|---|---|---|---|---|---|---|---|---|")
for name in ("selfcheck-torchrun", "selfcheck-fork-1", "selfcheck-fork-2", "selfcheck-fork-3"):
    f = R / f"{name}.json"
    if f.exists():
        doc = json.loads(f.read_text())
        med = overhead.medians(doc)
        print(f"| {name} | {len(overhead.rows(doc))} | " + (" | ".join(f"{v:.2f}" for v in med.values()) if med else "-") + " |")
f = R / "selfcheck-fork-1.json"
if f.exists():
    doc = json.loads(f.read_text())
    c = doc["machine"].get("ceilings") or {}
    print(f"\nceilings: latency {c.get('latency_s')}, link {c.get('link_bw')}, source {c.get('source')}")
    print("| problem | size | roof bound | roof us | ref us | roofline of the reference | suspect |")
    print("|---|---|---|---|---|---|---|")
    for it in doc["items"]:
        for s in it.get("sizes") or []:
            t = ((s.get("timing") or {}).get("reference") or {}).get("median_s")
            rf = (s.get("roofline") or {}).get("reference")
            print(f"| {it['problem']} | {s['name']} | {s.get('roof_bound')} | "
                  f"{(s.get('roof_s') or 0) * 1e6:.2f} | {(t or 0) * 1e6:.1f} | "
                  f"{'-' if rf is None else f'{rf:.1%}'} | {bool(s.get('suspect'))} |")
PY
log done
