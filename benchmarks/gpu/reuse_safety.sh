#!/usr/bin/env bash
# Backs docs/validation.md § Reuse that never changes an outcome: benchmarks/reuse_safety.py (the naive
# tests of tests/unit/vllm_reuse/safety_suite.py, reuse off and on) with real CUDA engines. Needs
# `benchmarks/gpu/stage.sh install` done on the same machine. Two device calls back to back (the work
# folder, WORK, outside the repo, lasts while the machine is held; the second prints the table):
#   RUNS=off benchmarks/gpu/reuse_safety.sh        RUNS=on benchmarks/gpu/reuse_safety.sh
# SELECT=EXPR runs a part of the suite (pytest's -k), both runs in one call where it is short:
#   SELECT="fresh_answers or precision or sleep or forked" RUNS=off,on benchmarks/gpu/reuse_safety.sh
# PART=N keeps a part apart from the rest of its run (reuse_safety.py's --part; the table merges parts), for
# a run longer than one call: SELECT="a or b" PART=1 RUNS=off ..., then SELECT="a or not (a or b)" PART=2.
# Into $OUT: reuse-safety-<runs><part>.log and each run's pytest log.
set -uo pipefail
[ -n "${OUT:-}" ] || { echo "reuse_safety.sh: OUT is not set (the device call's output folder)" >&2 && exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${WORK:-/root/reuse-safety}
runs=${RUNS:-off,on}
# shellcheck source=/dev/null
source "$here/env.sh"
cd "$root" || exit 2
install_project
mkdir -p "$OUT"
timeout -s INT -k 20 "${BUDGET_S:-540}" python3 benchmarks/reuse_safety.py --work "$work" --platform cuda \
  --runs "$runs" ${SELECT:+-k "$SELECT"} ${PART:+--part "$PART"} > "$OUT/reuse-safety-${runs//,/-}${PART:-}.log" 2>&1
code=$?
for name in off on; do cp "$work/$name${PART:-}/pytest.log" "$OUT/pytest-$name${PART:-}.log" 2> /dev/null; done
cat "$OUT/reuse-safety-${runs//,/-}${PART:-}.log"
exit "$code"
