# Sourced by the bench/gpu_*.sh scripts: repo root, import path, $OUT (what comes back from the
# device machine), the pytest command with the plugin, a timestamped log line, the machine's facts.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kb-out}; mkdir -p "$OUT"
PT="python3 -m pytest -p pytest_kernelbench.plugin -p no:cacheprovider -q -rfE"
log() { echo "=== $(date +%T) $*"; }
machine() { log env; nvidia-smi -L; python3 -c "import torch,sys;print(sys.version.split()[0],torch.__version__,torch.version.cuda,torch.cuda.nccl.version())"; }
