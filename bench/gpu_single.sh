#!/usr/bin/env bash
# What a one-GPU machine can check (no problem runs at W = 1, so the suite itself needs two GPUs):
#   - an unrelated pytest run with the plugin loaded does nothing (no probe, no report folder);
#   - the main job skips every item with its reason, and the table shows them;
#   - the rank-side multicast guard raises no false alarm on real CUDA work (torch, Triton,
#     load_inline, symmetric memory on a 1-rank NCCL group): bench/safety_gpu_check.py;
#   - the whole rank protocol on NCCL (first-call process-group timeout, timing, noise bands) on
#     W = 1 copies of all_reduce and all_gather, reference and shipped kernels.
source "$(dirname "$0")/gpu_common.sh"
R=/tmp/kb-reports; rm -rf $R; mkdir -p $R
machine
python3 -c "from pytest_kernelbench import hardware; print('multicast_supported', hardware.multicast_supported())"
log inert; mkdir -p $R/plain && printf 'def test_one():\n    pass\n' > $R/plain/test_plain.py
(cd $R/plain && $PT 2>&1 | tail -2; ls -A $R/plain)
log main-job-skips; $PT problems -k "collective" --kb-report=$R/skips.json 2>&1 | tail -16
log guard; python3 bench/safety_gpu_check.py 2>&1 | tail -20
log w1; python3 - <<'PY'
import shutil, yaml, pathlib
src, dst = pathlib.Path("problems/collective"), pathlib.Path("/tmp/kb-w1/collective")
for name in ("all_reduce", "all_gather"):
    shutil.rmtree(dst / name, ignore_errors=True)
    shutil.copytree(src / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    y = dst / name / "problem.yaml"
    d = yaml.safe_load(y.read_text()); d["world_sizes"] = [1]; y.write_text(yaml.safe_dump(d, sort_keys=False))
PY
$PT /tmp/kb-w1 --kb-candidate=reference --kb-report=$R/w1-reference.json 2>&1 | tail -12
$PT /tmp/kb-w1 --kb-candidate=shipped --kb-report=$R/w1-shipped.json 2>&1 | tail -12
cp $R/skips.json $R/w1-reference.json $R/w1-shipped.json "$OUT/" 2>/dev/null
log done
