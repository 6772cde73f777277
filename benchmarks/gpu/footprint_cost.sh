#!/usr/bin/env bash
# Backs docs/validation.md § Footprints on Python 3.12, test_forked after the NVML fix (the table in
# docs/selection.md, what footprints cost): `harness run pooling --platform cuda` with footprints off and
# on (HARNESS_FOOTPRINTS=0 / 1), in ORDER (default "off,on"; the next pair "on,off"),
# each run's wall seconds and CPU seconds (user + system of its process tree: harness run, its pytest
# phases and the engine processes they waited for), one line per run into $OUT/footprint-cost.txt.
# Needs `benchmarks/gpu/stage.sh install` done on the same machine. pytest-gpu-harness.pth goes into the
# interpreter's site-packages first, as an installed package has it, so engine processes record too.
#   PAIR=1 ORDER=off,on bash benchmarks/gpu/footprint_cost.sh; PAIR=2 ORDER=on,off bash ...
set -uo pipefail
[ -n "${OUT:-}" ] || { echo "footprint_cost.sh: OUT is not set (the device call's output folder)" >&2 && exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
runs=${RUNS:-/root/footprint-runs}
# shellcheck source=/dev/null
source "$here/env.sh"
export HARNESS_PLATFORM=cuda
cd "$root" || exit 2
install_project
cp pytest-gpu-harness.pth "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/"
mkdir -p "$runs" "$OUT"
IFS=, read -ra sides <<< "${ORDER:-off,on}"
for side in "${sides[@]}"; do
  case $side in off) flag=0 ;; on) flag=1 ;; *) echo "footprint_cost.sh: ORDER: $side is not off|on" >&2 && exit 2 ;; esac
  dir=$runs/pooling-$side-${PAIR:-1}
  rm -rf "$dir"
  HARNESS_FOOTPRINTS=$flag python3 - "$dir" "$side" "${PAIR:-1}" "${LIMIT_S:-280}" >> "$OUT/footprint-cost.txt" \
    2>> "$OUT/footprint-cost-$side-${PAIR:-1}.log" << 'EOF'
import json, resource, subprocess, sys, time
dir, side, pair, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
command = ["harness", "run", "pooling", "--platform", "cuda", "--out", dir, "--", "-rfE"]
start = time.monotonic()
try:
    code = subprocess.run(command, stdout=sys.stderr, timeout=limit).returncode
except subprocess.TimeoutExpired:
    code = "timeout"
wall = time.monotonic() - start
used = resource.getrusage(resource.RUSAGE_CHILDREN)
try:
    report = json.load(open(f"{dir}/report.json"))
    outcomes = {}
    for test in report.get("tests", []):
        outcomes[test.get("outcome")] = outcomes.get(test.get("outcome"), 0) + 1
    footprints = report.get("footprints")
    recorded = len(json.dumps(footprints)) if footprints else 0
except (OSError, ValueError) as error:
    outcomes, recorded = str(error), 0
print(f"pair {pair} footprints {side}: exit {code}, wall {wall:.1f} s, CPU {used.ru_utime + used.ru_stime:.1f} s "
      f"(user {used.ru_utime:.1f}, sys {used.ru_stime:.1f}), outcomes {outcomes}, footprints {recorded} bytes", flush=True)
EOF
  tail -1 "$OUT/footprint-cost.txt"
done
