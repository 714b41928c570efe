#!/usr/bin/env bash
# Issue 46 on ONE GPU: ParallelKernelBench's published CUDA kernels of its three models (the
# solutions_cuda_* folders of its first commit, dab0830) at W = 2, the ranks sharing the GPU
# (--kb-oversubscribe: correctness only, never a speed). PKB's files are never committed: put a
# checkout in .pkb first (`git archive dab0830` of togethercomputer/ParallelKernelBench, untar into
# .pkb; it is git-ignored) and pass `carry: [".pkb"]` to the device call. A kernel whose code names
# multicast is refused before it runs (unsafe), as everywhere. Per model: one JSON report in $OUT,
# then a table of passes and failure categories, last.
#   KB_PKB (default .pkb), KB_PKB_S (default 480: split evenly over the models), KB_PKB_N (xdist
#   workers sharing the GPU, default 4), KB_PKB_MODELS (default: every solutions_cuda_* folder)
source "$(dirname "$0")/gpu_common.sh"
PKB=${KB_PKB:-.pkb}
[ -d "$PKB/reference" ] || { echo "no PKB checkout at $PKB"; exit 2; }
MODELS=${KB_PKB_MODELS:-$(cd "$PKB" && ls -d solutions_cuda_* | tr '\n' ' ')}
n=$(echo $MODELS | wc -w); EACH=$(( ${KB_PKB_S:-480} / (n > 0 ? n : 1) ))
machine
for m in $MODELS; do
  log "$m at W = 2 on one GPU (${EACH}s)"
  timeout -k 10 -s INT "$EACH" $PT --kb-pkb="$PKB" --kb-solutions="$PKB/$m" --kb-pkb-backend=cuda \
    --kb-oversubscribe --kb-nproc=2 --kb-sizes=tiny --kb-timeout=120 --kb-compile-timeout=180 \
    -n "${KB_PKB_N:-4}" --kb-report="$OUT/pkb-w2-$m.json" 2>&1 | tail -2
done
log table
python3 - "$OUT" $MODELS <<'PY'
import collections, json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("| model | items | passed | failed (by category) | skipped | error |")
print("|---|---|---|---|---|---|")
for m in sys.argv[2:]:
    path = out / f"pkb-w2-{m}.json"
    items = json.loads(path.read_text())["items"] if path.exists() else []
    if not items and (out / f"pkb-w2-{m}.jsonl").exists():
        items = [json.loads(l) for l in (out / f"pkb-w2-{m}.jsonl").read_text().splitlines() if l.strip()]
    by = collections.Counter(i["outcome"] for i in items)
    cats = collections.Counter(i.get("failure") for i in items if i["outcome"] == "failed")
    print(f"| {m.split('_h100_8_')[-1]} | {len(items)} | {by['passed']} | "
          f"{', '.join(f'{k} {v}' for k, v in cats.most_common()) or '-'} | {by['skipped']} | {by['error']} |")
PY
log done
