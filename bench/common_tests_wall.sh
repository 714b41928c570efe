#!/usr/bin/env bash
# The README's test command on the tests two commits both have, back to back on this machine: what
# a change costs the suite without the tests added since (issue 21's "the test command's wall time").
#   bash bench/common_tests_wall.sh OLD_WORKTREE        (e.g. git worktree add /tmp/old 12a46b9)
# Node ids are passed in a file (@FILE): parametrized ids hold spaces.
set -uo pipefail
old=$(cd "$1" && pwd); new=$(cd "$(dirname "$0")/.." && pwd); tmp=$(mktemp -d)
ids() { (cd "$1" && PYTHONPATH="$1" python -m pytest tests --collect-only -q -p no:cacheprovider 2>/dev/null | grep "::"); }
ids "$old" > "$tmp/old"; ids "$new" > "$tmp/new"
grep -Fxf "$tmp/old" "$tmp/new" > "$tmp/common"     # in the order they are collected now (module fixtures)
echo "tests: $(wc -l < "$tmp/old") at $(git -C "$old" rev-parse --short HEAD), $(wc -l < "$tmp/new") now, $(wc -l < "$tmp/common") in both"
for side in old new; do
  dir=${!side}; t0=$(date +%s)
  (cd "$dir" && PYTHONPATH="$dir" python -m pytest @"$tmp/common" -n 3 --dist loadscope -q -p no:cacheprovider 2>&1 | tail -1)
  echo "$side: $(( $(date +%s) - t0 )) s wall"
done
