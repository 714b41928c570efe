# Sourced by the bench/gpu_*.sh scripts: repo root, import path, $OUT (what comes back from the
# device machine), the pytest command with the plugin, a timestamped log line, the machine's facts.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kb-out}; mkdir -p "$OUT"
PT="python3 -m pytest -p pytest_kernelbench.plugin -p no:cacheprovider -q -rfE"
log() { echo "=== $(date +%T) $*"; }
machine() { log env; nvidia-smi -L; python3 -c "import torch,sys;print(sys.version.split()[0],torch.__version__,torch.version.cuda,torch.cuda.nccl.version())"; }
w1_copy() {   # w1_copy DEST PROBLEM...: copies of the named problem folders under DEST, valid at W = 1
  python3 - "$@" <<'PY'
import pathlib, shutil, sys, yaml
dst = pathlib.Path(sys.argv[1])
for rel in sys.argv[2:]:
    out = dst / rel
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(pathlib.Path("problems") / rel, out, ignore=shutil.ignore_patterns("__pycache__"))
    d = yaml.safe_load((out / "problem.yaml").read_text())
    d["world_sizes"] = [1]
    (out / "problem.yaml").write_text(yaml.safe_dump(d, sort_keys=False))
PY
}
with_knobs() {   # with_knobs VARIANT CMD...: CMD with VARIANT's comma-separated NAME=VALUE dev knobs ("as-is": none)
  local v=$1; shift
  env $( [ "$v" = as-is ] || echo "$v" | tr ',' ' ' ) "$@"
}
