#!/usr/bin/env bash
# The twelfth session's call on the GPU host (its line_in_situ.py, mapped against written ledger lines, went
# with the mapped ledger, issue 35): what freezing the collection saves a suite that
# collects garbage after every test, with the image's torch imported (benchmarks/gc_freeze.py); and the
# goal's figure (benchmarks/plugin_overhead.py, the cuda platform). Each file lands in $OUT.
#   benchmarks/gpu/ledger_and_freeze.sh [overhead rounds, default 40]   (on the device machine)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source "$here/env.sh"
cd "$here/../.." || exit 2
rounds=${1:-40}
out=${OUT:-/tmp}
install_project || exit 1
echo "== $(date -u +%FT%TZ) $(nproc) cores $(python3 -c 'import platform; print(platform.python_version())')"
python3 benchmarks/gc_freeze.py --tests 100 --rounds 1 2>&1 | tee "$out/gc-freeze.txt"
HARNESS_PLATFORM=cuda python3 benchmarks/plugin_overhead.py --rounds "$rounds" 2>&1 | tee "$out/overhead-cuda-$rounds.txt"
