#!/usr/bin/env bash
# The plugin-overhead gap on the GPU host, by stretch of a session: installs this tree into PROJECT_SITE,
# says what the host's pytest loads, what its Python start and a page fault cost, then runs
# benchmarks/session_phases.py (plain, the cpu platform, the cuda platform; ROUNDS rounds, default 9), with
# the host's BLAS thread pool and with one BLAS thread. Given arguments, it runs session_phases.py with those
# instead, one BLAS thread only. A first argument --fake-nvml adds the variant fake-nvml: the cuda platform
# over tests/fakes/pynvml.py describing this host's GPUs, so what NVML's library costs a session shows
# beside the cuda platform's figure (the fake is Python and not free: its import and a JSON read a call).
# Output on stdout and in $OUT/phases.txt when OUT is set.
#   benchmarks/gpu/overhead_phases.sh [--fake-nvml] [session_phases.py's arguments]   (on the device machine)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=/dev/null
source "$here/env.sh"
unset PYTHONDONTWRITEBYTECODE
cd "$here/../.." || exit 2
fake_nvml=
if [ "${1:-}" = "--fake-nvml" ]; then # one more variant: the cuda platform over the tests' fake NVML
  shift
  fake_nvml=1
fi
out=${OUT:-/tmp}/phases.txt
{
  install_project || exit 1
  echo "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) $(nproc) cores"
  python3 -m pytest -VV 2>&1 | tr '\n' ' ' && echo
  for code in "pass" "import numpy" "import pynvml; pynvml.nvmlInit()"; do
    /usr/bin/time -f "python3 -c '$code': %e s wall, %U+%S s CPU" python3 -c "$code" 2>&1 | tail -1
  done
  # what one minor page fault costs here (NVML's start adds thousands to a cuda session)
  python3 -c 'import mmap, time; n = 25600; m = mmap.mmap(-1, n * 4096); t = time.perf_counter()
for i in range(0, n * 4096, 4096): m[i] = 1
print(f"a fresh page touched: {(time.perf_counter() - t) / n * 1e6:.2f} us each, {n} pages")'
  ls /proc/driver/nvidia/gpus/ 2>&1 | head -3
  if [ -n "$fake_nvml" ]; then
    # the harness's whole cuda path without NVML's library: tests/fakes/pynvml.py describing this host's
    # GPUs as NVML lists them (names without spaces: a variant's words are split on them)
    gpus=$(python3 -c 'import json, os; from harness.platform import detect
found = detect({**os.environ, "HARNESS_PLATFORM": "cuda"}).platform.devices()
print(json.dumps([{"name": d.name.replace(" ", "_"), "uuid": d.uuid, "bus": d.pci_bus_id,
  "total": d.total_bytes, "used": 0} for d in found], separators=(",", ":")))') || exit 1
    set -- "$@" --variant "fake-nvml=cuda HARNESS_NVML_MODULE=tests.fakes.pynvml FAKE_GPUS=$gpus \
PYTHONPATH=$PWD/benchmarks:$PWD:$PYTHONPATH"
  fi
  if [ $# -gt 0 ]; then
    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python3 benchmarks/session_phases.py "$@"
    exit
  fi
  python3 benchmarks/session_phases.py --rounds "${ROUNDS:-9}" --platforms cpu,cuda
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python3 benchmarks/session_phases.py --rounds "${ROUNDS:-9}" \
    --platforms cpu,cuda | sed 's/^2000 trivial tests/with OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1: 2000 trivial tests/'
} 2>&1 | tee "$out"
