#!/usr/bin/env bash
# What one GPU can check of the native (CUDA template) problems and the shipped symm_mem kernels:
#   w1      the native problems valid at W = 1 (single-GPU by nature), shipped solution and the
#           unfilled template as candidates (the template must fail as a mismatch, never hang)
#   smoke   W = 1 copies of the multi-GPU native problems (their world_sizes patched to [1]) and of
#           the four symm_mem collectives: build, glue, load, check and time on a real GPU. A
#           degenerate world (no peer), so a smoke test of the path, never evidence of W >= 2.
# Reports land in $OUT; the last lines printed are a short table.
#   bash bench/gpu_native_w1.sh [w1|smoke|all]
source "$(dirname "$0")/gpu_common.sh"
R=/tmp/kb-native; rm -rf $R; mkdir -p $R
what=${1:-all}
machine
nvcc --version | tail -2
# where the communication libraries' headers are (the native recipes resolve them the same way)
python3 - <<'PY'
import glob, os, site
roots = site.getsitepackages() + ["/usr/include", "/usr/local/include", "/usr/local/cuda/include", "/opt"]
for name in ("nccl.h", "nccl_device.h", "nvshmem.h", "nvshmemx.h"):
    hits = [h for r in roots for h in glob.glob(os.path.join(r, "**", name), recursive=True)][:3]
    print(f"header {name}: {hits or 'not found'}")
PY

# folders of the native problems, split by whether W = 1 is one of their world sizes
python3 - <<'PY' > $R/native.txt
import pathlib, yaml
for y in sorted(pathlib.Path("problems").glob("*/*/problem.yaml")):
    d = yaml.safe_load(y.read_text())
    if d.get("kind") == "native" and "cuda" in d.get("devices", []):
        print(("w1" if 1 in d.get("world_sizes", []) else "multi"), y.parent)
PY
cat $R/native.txt

if [ "$what" = w1 ] || [ "$what" = all ]; then
  W1=$(awk '$1=="w1"{print $2}' $R/native.txt)
  log "w1 shipped: $W1"
  timeout -k 10 -s INT "${KB_W1_S:-330}" $PT $W1 --kb-report=$R/w1-shipped.json 2>&1 | tail -25
  # the unfilled templates as --kb-solutions candidates: every one must fail (mismatch), none hang
  mkdir -p $R/templates
  for d in $W1; do c=$(basename "$(dirname "$d")"); mkdir -p $R/templates/$c; cp $d/template.cu $R/templates/$c/$(basename "$d").cu; done
  log "w1 templates"
  timeout -k 10 -s INT 150 $PT $W1 --kb-solutions=$R/templates --kb-timing=off --kb-sizes=tiny \
    --kb-timeout=60 --kb-report=$R/w1-templates.json 2>&1 | tail -15
  cp $R/w1-shipped.json $R/w1-templates.json "$OUT/" 2>/dev/null
fi

if [ "$what" = smoke ] || [ "$what" = all ]; then
  log "smoke: W = 1 copies"
  python3 - <<'PY'
import pathlib, shutil, yaml
dst = pathlib.Path("/tmp/kb-w1copies")
shutil.rmtree(dst, ignore_errors=True)
lines = pathlib.Path("/tmp/kb-native/native.txt").read_text().split("\n")
folders = [pathlib.Path(l.split()[1]) for l in lines if l.startswith("multi ")]
folders += [pathlib.Path("problems/collective") / n for n in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")]
for src in folders:
    out = dst / src.parent.name / src.name
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("__pycache__"))
    y = out / "problem.yaml"
    d = yaml.safe_load(y.read_text())
    d["world_sizes"] = [1]
    y.write_text(yaml.safe_dump(d, sort_keys=False))
print(len(folders), "copies")
PY
  timeout -k 10 -s INT "${KB_SMOKE_S:-330}" $PT /tmp/kb-w1copies --kb-candidate=shipped --kb-sizes=tiny,small \
    --kb-timeout=90 --kb-report=$R/w1-smoke.json 2>&1 | tail -45
  cp $R/w1-smoke.json "$OUT/" 2>/dev/null
fi

log table
python3 - <<'PY'
import json, pathlib
for f in sorted(pathlib.Path("/tmp/kb-native").glob("w1-*.json")):
    doc = json.loads(f.read_text())
    print(f"## {f.name}")
    for i in doc["items"]:
        sizes = i.get("sizes") or []
        score = i.get("score")
        m = (i.get("message") or "").splitlines()[0][:110] if i.get("outcome") != "passed" else ""
        print(f"{i['problem']:<42} {i['outcome']:<8} {i.get('failure') or '':<20} "
              f"{'' if score is None else f'{score:.2f}x'} {m}")
PY
log done
