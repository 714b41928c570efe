#!/usr/bin/env bash
# Which part of the candidate's side costs time (one GPU): the self-check of all_reduce (W = 1 copy)
# with the environment watcher and the in-process guards switched off one at a time.
source "$(dirname "$0")/gpu_common.sh"
mkdir -p /tmp/kn
python3 - <<'PY'
import pathlib, shutil, yaml
src = pathlib.Path("problems/collective/all_reduce"); dst = pathlib.Path("/tmp/kn/w1/collective/all_reduce")
shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "solutions"))
d = yaml.safe_load((dst / "problem.yaml").read_text()); d["world_sizes"] = [1]; d.pop("solutions", None)
(dst / "problem.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
PY
for v in "as-is" "KB_DEV_NO_WATCH=1" "KB_DEV_NO_GUARDS=1" "KB_DEV_NO_WATCH=1 KB_DEV_NO_GUARDS=1"; do
  env $( [ "$v" = as-is ] || echo $v ) timeout 120 $PT /tmp/kn/w1 --kb-candidate=reference --kb-sizes=small,medium \
     --kb-timing-rounds=10 --kb-report=/tmp/kn/$(echo $v | tr ' =' '__').json > /dev/null 2>&1
  python3 - "$v" /tmp/kn/$(echo $v | tr ' =' '__').json <<'PY'
import json, sys
d = json.load(open(sys.argv[2])); i = d["items"][0]
print(sys.argv[1], i["outcome"], [(s["name"], round(s.get("speedup") or 0, 3), round(s["timing"]["reference"]["median_s"] * 1e6, 1),
       round(s["timing"]["candidate"]["median_s"] * 1e6, 1), s["timing"]["reference"]["iters"]) for s in i["sizes"]])
PY
  cp /tmp/kn/*.json $OUT/ 2>/dev/null
done
