#!/usr/bin/env bash
# Issue 16 on whatever GPUs the machine has (W = every GPU it has; one GPU: W = 1 copies). One
# step per call where a whole-suite run needs most of a call's 10 minutes (2 or more GPUs):
#   bash bench/gpu_issue16.sh selfcheck N   self-check run N (reference vs itself, fork launcher),
#                                           preceded on N = 1 by the ping-pong latency
#   bash bench/gpu_issue16.sh torchrun      the same under torchrun, on $KB_TORCHRUN_SEL (default:
#                                           problems/collective), for the launcher comparison
#   bash bench/gpu_issue16.sh all           every step in one call (one GPU: W = 1 copies, small)
# Each report lands in $OUT; the tables are made where the reports come back:
#   kernelbench spread selfcheck-fork-{1,2,3}.json          per-size spread over the runs
#   kernelbench overhead selfcheck-{fork-1,torchrun}.json   per-phase cost per item, medians last
#   kernelbench suite-table selfcheck-fork-1.json           roofline (with its bound) per problem and size
source "$(dirname "$0")/gpu_common.sh"
R=/tmp/kb-16; mkdir -p $R
what=${1:-all}
machine
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")

pingpong() {
  log "ping-pong latency"
  python3 - <<'PY' | tee "$OUT/pingpong.txt"
import torch
from pytest_kernelbench.metrics.calibrate import pingpong_latency
n = torch.cuda.device_count()
d0 = torch.device("cuda", 0)
print(f"one GPU, two streams (not a link): {pingpong_latency(torch, d0, d0, iters=20000) * 1e6:.3f} us one-way")
if n > 1:
    torch.ones(1, device=d0).copy_(torch.ones(1, device="cuda:1"))   # peer access both ways
    torch.ones(1, device="cuda:1").copy_(torch.ones(1, device=d0))
    print(f"GPU 0 <-> GPU 1 over NVLink: {pingpong_latency(torch, d0, torch.device('cuda', 1)) * 1e6:.3f} us one-way")
PY
}

SEL="problems"
if [ "$NGPU" = 1 ]; then
  # one GPU: the problems valid at W = 1, plus W = 1 copies of problems whose references run
  # alone (a degenerate world: this measures the harness and the timing, not communication)
  python3 - <<'PY'
import pathlib, shutil, yaml
dst = pathlib.Path("/tmp/kb-16/w1")
shutil.rmtree(dst, ignore_errors=True)
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

selfcheck() {
  log "self-check run $1 (fork)"
  timeout -k 10 -s INT "${KB_RUN_S:-540}" $PT $SEL --kb-candidate=reference --kb-launcher=fork \
    --kb-report=$R/selfcheck-fork-$1.json 2>&1 | tail -4
  cp $R/selfcheck-fork-$1.json "$OUT/"
}

torchrun_run() {
  local sel=${KB_TORCHRUN_SEL:-problems/collective}
  [ "$NGPU" = 1 ] && sel=$SEL/collective
  log "self-check run (torchrun) on $sel"
  timeout -k 10 -s INT "${KB_RUN_S:-540}" $PT $sel --kb-candidate=reference --kb-launcher=torchrun \
    --kb-report=$R/selfcheck-torchrun.json 2>&1 | tail -4
  cp $R/selfcheck-torchrun.json "$OUT/"
}

case "$what" in
  selfcheck) n=${2:-1}; [ "$n" = 1 ] && pingpong; selfcheck "$n" ;;
  torchrun) torchrun_run ;;
  all) pingpong; for n in 1 2 3; do KB_RUN_S=${KB_RUN_S:-120} selfcheck $n; done; KB_RUN_S=${KB_RUN_S:-120} torchrun_run ;;
  *) echo "usage: gpu_issue16.sh selfcheck N | torchrun | all"; exit 2 ;;
esac

log tables
KB="python3 -m pytest_kernelbench.cli"
runs=$(ls $R/selfcheck-fork-*.json 2>/dev/null)
[ -n "$runs" ] && $KB spread $runs | tail -8
for f in $R/selfcheck-*.json; do echo "## $(basename $f)"; $KB overhead $f | tail -1; done
[ -f $R/selfcheck-fork-1.json ] && $KB suite-table $R/selfcheck-fork-1.json | tail -60
log done
