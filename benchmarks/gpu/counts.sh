#!/usr/bin/env bash
# The plugin's overhead on the GPU host in counts no load there moves: Python lines executed
# (benchmarks/python_lines.py) and instructions under cachegrind (plugin_overhead.py --instructions), for
# the cpu and the cuda platform, with the host's Python and pytest. The image has no valgrind: this
# machine's (Debian's 3.19) travels in .valgrind/ (carry it): valgrind.bin renamed `valgrind`,
# cachegrind-amd64-linux, vgpreload_core-amd64-linux.so and default.supp from /usr/libexec/valgrind.
# cachegrind's per-function files land in $OUT/<platform>/ for cg_annotate.
#   benchmarks/gpu/counts.sh [tests, default 2000]   (on the device machine)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source "$here/env.sh"
unset PYTHONDONTWRITEBYTECODE
cd "$here/../.." || exit 2
tests=${1:-2000}
out=${OUT:-/tmp}
install_project || exit 1
export VALGRIND_LIB=$PWD/.valgrind PATH=$PWD/.valgrind:$PATH
{
  echo "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) $(uname -r)"
  python3 -m pytest -VV 2>&1 | tr '\n' ' ' && echo
  for platform in cpu cuda; do
    echo "== $platform platform"
    HARNESS_PLATFORM=$platform python3 benchmarks/python_lines.py --tests "$tests" --top 30
    HARNESS_PLATFORM=$platform timeout 400 python3 benchmarks/plugin_overhead.py --tests "$tests" --rounds 3 \
      --instructions --keep "$out/$platform"
  done
} 2>&1 | tee "$out/counts.txt"
