#!/usr/bin/env bash
# Backs docs/validation.md § A forked engine after CUDA init (issue 60 item 1): benchmarks/gpu/cuda_fork_probe.py
# (the driver's state against torch's flag; a child forked after it) and benchmarks/gpu/cuda_fork.py (the
# suite's arms: plain, fork, harness, baseline). Needs `benchmarks/gpu/stage.sh install` done on the same
# machine. Into $OUT: cuda-fork.log and cuda-fork-runs.tar.gz (each arm's pytest log and ledger).
#   BUDGET_S=420 bash benchmarks/gpu/cuda_fork.sh
set -uo pipefail
[ -n "${OUT:-}" ] || { echo "cuda_fork.sh: OUT is not set (the device call's output folder)" >&2 && exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${WORK:-/root/cuda-fork}
# shellcheck source=/dev/null
source "$here/env.sh"
cd "$root" || exit 2
install_project
mkdir -p "$OUT"
{
  timeout -k 5 60 python3 "$here/cuda_fork_probe.py"
  timeout -s INT -k 20 "${BUDGET_S:-420}" python3 "$here/cuda_fork.py" --work "$work" ${ARMS:+--arms "$ARMS"}
} > "$OUT/cuda-fork.log" 2>&1
code=$?
tar czf "$OUT/cuda-fork-runs.tar.gz" -C "$work" --exclude=model . 2> /dev/null
cat "$OUT/cuda-fork.log"
exit "$code"
