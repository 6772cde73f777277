#!/usr/bin/env bash
# Backs docs/validation.md § Real vLLM 0.26.0 (reuse through vLLM's own conftest): the vLLM-tree figure
# with real CUDA engines: benchmarks/vllm_tree.py over vLLM 0.26.0's own tests/conftest.py, unedited (plain pytest, harness reuse off, reuse on as a first run, the hand-fixed
# file; harness compare off -> on). Needs `benchmarks/gpu/stage.sh install` done on the same machine and
# the 0.26.0 sdist carried with the call (the machine has no network). Here, before the call:
#   python benchmarks/vllm_tree.py --fetch-only --cache .xfer/vllm-tree --version 0.26.0   (44 MB)
# then, in two device calls back to back on one machine, each carrying .xfer/vllm-tree (the work folder,
# WORK, outside the repo, lasts while the machine is held; the second call prints the table):
#   PARTS=plain,off benchmarks/gpu/vllm_tree.sh                                          ~4-5 min
#   PARTS=on,fixed  benchmarks/gpu/vllm_tree.sh                                          ~3-4 min
# (PARTS unset: all four in one call, ~7-9 min.) Into $OUT: vllm-tree.log (the runs; the table once all four
# ran), vllm-tree-results.json, and each harness run's report (reports/<run>-<n>.json).
set -uo pipefail
[ -n "${OUT:-}" ] || { echo "vllm_tree.sh: OUT is not set (the device call's output folder)" >&2 && exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
sdist=${SDIST:-$root/.xfer/vllm-tree/vllm-0.26.0.tar.gz}
work=${WORK:-/root/vllm-tree}
[ -f "$sdist" ] || { echo "vllm_tree.sh: $sdist did not travel: carry .xfer/vllm-tree" >&2 && exit 2; }
# shellcheck source=/dev/null
source "$here/env.sh"
export HARNESS_PLATFORM=cuda
cd "$root" || exit 2
install_project
mkdir -p "$OUT"
timeout -s INT -k 20 "${BUDGET_S:-540}" python3 benchmarks/vllm_tree.py --work "$work" --sdist "$sdist" \
  --version 0.26.0 --platform cuda --kv-cache-gib 0 --runs "${PARTS:-plain,off,on,fixed}" 2>&1 |
  tee "$OUT/vllm-tree.log"
code=${PIPESTATUS[0]}
cp "$work/vllm-tree-results.json" "$OUT/" 2> /dev/null
cp -r "$work/reports" "$OUT/" 2> /dev/null
exit "$code"
