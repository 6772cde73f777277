#!/usr/bin/env bash
# Backs docs/ci.md § Compile cache: engines start warm (its CUDA figures): benchmarks/warm_starts.py (one compiled vLLM start, cold
# then warm from the kept compile cache) on the GPU machine. Needs `benchmarks/gpu/stage.sh install` done on
# the same machine. Into $OUT: warm-starts.log and each run's harness log.
#   PAIRS=2 BUDGET_S=300 bash benchmarks/gpu/warm_starts.sh
set -uo pipefail
[ -n "${OUT:-}" ] || { echo "warm_starts.sh: OUT is not set (the device call's output folder)" >&2 && exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${WORK:-/root/warm-starts}
# shellcheck source=/dev/null
source "$here/env.sh"
cd "$root" || exit 2
install_project
mkdir -p "$OUT"
timeout -s INT -k 20 "${BUDGET_S:-300}" python3 benchmarks/warm_starts.py --work "$work" --platform cuda \
  --pairs "${PAIRS:-1}" > "$OUT/warm-starts.log" 2>&1
code=$?
tar czf "$OUT/warm-starts-runs.tar.gz" -C "$work" --exclude=model --exclude=kept . 2> /dev/null
cat "$OUT/warm-starts.log"
exit "$code"
