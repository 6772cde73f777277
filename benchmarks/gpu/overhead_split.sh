#!/usr/bin/env bash
# Where the cuda platform's extra overhead goes on the GPU host (plugin_overhead.py's cuda ratio sits above
# its cpu ratio there): a one-test session and 2000 trivial tests, plain pytest against the harness as the
# cpu platform, the cuda platform, and the cuda platform without the memory sampler, in alternating rounds.
# Prints each variant's median wall and CPU (user + system) seconds over ROUNDS rounds (default 7).
#   benchmarks/gpu/overhead_split.sh   (after `source benchmarks/gpu/env.sh` and the project installed)
set -euo pipefail
unset PYTHONDONTWRITEBYTECODE # bytecode cached as for any installed package (as benchmarks/trivial.py does)
rounds=${ROUNDS:-7}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for tests in 1 2000; do
  mkdir -p "$work/s$tests"
  python3 -c "import sys; print(''.join(f'def test_{n}():\n    pass\n\n\n' for n in range(int(sys.argv[1]))))" \
    "$tests" >"$work/s$tests/test_trivial.py"
  echo '[tool.pytest.ini_options]' >"$work/s$tests/pyproject.toml"
done
run() { # run TESTS VARIANT: one timed session, "wall cpu" (seconds) on stdout
  local args=(--harness --harness-ledger-dir "$work/l$RANDOM$RANDOM") env=(HARNESS_PLATFORM=cuda)
  case $2 in
    plain) args=(-p no:harness) ;;
    cpu) env=(HARNESS_PLATFORM=cpu) ;;
    cuda-nosampler) env+=(HARNESS_MEMORY_SAMPLE_S=0) ;;
  esac
  (cd "$work/s$1" && env "${env[@]}" /usr/bin/time -f "%e %U %S" python3 -m pytest -q -p no:cacheprovider \
    test_trivial.py "${args[@]}" 2>&1 >/dev/null | tail -1 | awk '{print $1, $2 + $3}')
}
variants=(plain cpu cuda cuda-nosampler)
for tests in 1 2000; do
  declare -A walls=() cpus=()
  run "$tests" plain >/dev/null # warm the caches
  for ((r = 0; r < rounds; r++)); do
    for v in "${variants[@]}"; do
      read -r wall cpu < <(run "$tests" "$v")
      walls[$v]+="$wall " cpus[$v]+="$cpu "
    done
  done
  for v in "${variants[@]}"; do
    printf '%s tests, %-15s median wall %s s, CPU %s s\n' "$tests" "$v" \
      "$(tr ' ' '\n' <<<"${walls[$v]}" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')" \
      "$(tr ' ' '\n' <<<"${cpus[$v]}" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
  done
  unset walls cpus
done
