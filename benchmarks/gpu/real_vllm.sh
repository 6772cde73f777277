#!/usr/bin/env bash
# Backs docs/validation.md § Real vLLM 0.26.0: real vLLM 0.26.0 on CUDA under the harness, on the lent
# H200 machine (the successor of validate.sh's vLLM part); each figure is a line of $OUT/figures.txt. Needs `benchmarks/gpu/stage.sh install` done on the same machine. Three device calls, each
# under 9 minutes, in order of priority (a short lease drops the last):
#   real_vllm.sh part1  the machine; (d) one engine start in a plain script, fresh and after CUDA init;
#                       (a) harness run pooling, then generation, on every GPU                   ~5-6 min
#   real_vllm.sh part2  (c) vLLM PR #52570's shape with the harness and on plain vLLM;
#                       (e) pooling and generation on GPU 0 alone, compared with part1's runs    ~6-7 min
#   real_vllm.sh part3  (b) harness run pooling-naive on every GPU, harness compare naive -> shipped ~6 min
#   real_vllm.sh part4  (f) benchmarks/reuse.py's reuse-off run of the naive example and the shipped
#                       suite, every GPU                                                             ~5 min
#   real_vllm.sh part5  (f) its reuse-on runs, without and with history, and its table            ~4 min
#   real_vllm.sh part6  (g) benchmarks/plugin_overhead.py on this host's CPU, as the cpu and cuda
#                       platforms, ROUNDS rounds each (default 9)                          ~2 min (15: ~7)
#   real_vllm.sh part7  (c') (c)'s embedding module shape alone with the harness: the seconds from its
#                       blocked start to the error, read from the ledger                            ~1 min
#   real_vllm.sh part8  (h) two GPUs: a TP=2 start beside a one-device engine on GPU 0, blocked and named
#                       (part1's runs hold the multi-gpu phase's real TP=2 engines; part2 the ratios)  ~2 min
# Each part installs the project from this tree first. Every step runs under `timeout`, cut to what is
# left of the part's PART_BUDGET_S (default 510 s), so a part ends and packs its files inside the call.
# Into $OUT (at most 8 files come back): figures.txt (a line per step and each run's summary.md),
# PART.log, PART.tar.gz (its run directories) and each suite's report.json as SUITE-gpuDEVICES.json.
# Run directories stay in /root/runs (RUNS) for the later parts.
set -uo pipefail
part=${1:-}
case $part in part[1-8]) ;; *) echo "usage: real_vllm.sh part1|part2|...|part8" >&2 && exit 2 ;; esac
[ -n "${OUT:-}" ] || { echo "real_vllm.sh: OUT is not set (the device call's output folder)" >&2 && exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
runs=${RUNS:-/root/runs}
deadline=$((SECONDS + ${PART_BUDGET_S:-510}))
# shellcheck source=/dev/null
source "$here/env.sh"
export HARNESS_PLATFORM=cuda
mkdir -p "$runs" "$OUT"
cd "$root" || exit 2
gpus=$(nvidia-smi -L | grep -c '^GPU')
every=$(seq -s, 0 $((gpus - 1)))
all=gpu${every//,/} # the run directories' suffix for every GPU

figure() { echo "$*" | tee -a "$OUT/figures.txt"; }
step() {
  local used
  used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | paste -sd' ')
  printf '\n=== %s (%s; GPU MiB used: %s)\n' "$*" "$(date -u +%T)" "$used"
}
# bounded LIMIT_S COMMAND...: COMMAND under timeout (SIGINT, then SIGKILL), cut to the part's time left less
# 30 s for packing; exit 125 without running it when under 20 s are left.
bounded() {
  local limit=$(($1 < deadline - SECONDS - 30 ? $1 : deadline - SECONDS - 30))
  shift
  [ "$limit" -ge 20 ] || { figure "skipped, the part's time is up: $*" && return 125; }
  timeout -s INT -k 20 "$limit" "$@"
}
pack() { # pack NAME...: those of /root/runs into PART.tar.gz (report.html only repeats svg and summary)
  local name kept=()
  for name in "$@"; do [ -e "$runs/$name" ] && kept+=("$name"); done
  tar czf "$OUT/$part.tar.gz" --exclude=report.html -C "$runs" "${kept[@]}"
}

# suite NAME DEVICES LIMIT_S: harness run NAME on CUDA_VISIBLE_DEVICES=DEVICES into /root/runs/NAME-gpuDEVICES
suite() {
  local name=$1-gpu${2//,/} t0=$SECONDS code
  step "harness run $1 --platform cuda, CUDA_VISIBLE_DEVICES=$2"
  rm -rf "${runs:?}/$name"
  CUDA_VISIBLE_DEVICES=$2 bounded "$3" harness run "$1" --platform cuda --out "$runs/$name" -- -rfE
  code=$?
  [ "$code" -ne 125 ] || return
  [ -f "$runs/$name/report.json" ] || harness report "$runs/$name" # a run cut by timeout
  figure "$name: harness run exit $code in $((SECONDS - t0)) s"
  cat "$runs/$name/summary.md" >> "$OUT/figures.txt"
  cp "$runs/$name/report.json" "$OUT/$name.json"
}

install_project() {
  step "the project (this tree) into $PROJECT_SITE"
  rm -rf "${PROJECT_SITE:?}"
  bounded 120 python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
    --target "$PROJECT_SITE" . || { figure "the project did not install" && exit 1; }
}

part1() {
  step "the machine"
  nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv | tee -a "$OUT/figures.txt"
  harness doctor --json > "$runs/doctor.json"
  figure "harness doctor: exit $?"
  python3 -c 'from importlib.metadata import version as v; print("vllm", v("vllm"), "torch", v("torch"))' |
    tee -a "$OUT/figures.txt"
  mkdir -p "$runs/engine-start"
  local flag log
  for flag in "" --cuda-first; do
    log=$runs/engine-start/${flag:-fresh}.log
    log=${log/--/}
    step "(d) one engine start in a plain script ${flag:-fresh}; the suite's starts follow in this call"
    bounded 100 python3 "$here/engine_start.py" ${flag:+"$flag"} > "$log" 2>&1
    figure "engine_start.py ${flag:-fresh}: exit $?: $(grep '^plain script' "$log" || tail -2 "$log")"
  done
  suite pooling "$every" 300
  suite generation "$every" 240
  pack doctor.json engine-start "pooling-$all" "generation-$all"
}

# (c) the CPU shapes of tests/unit/vllm_live_engine at 0.92 of the GPU (a module-scoped engine alive when a
# later test builds its own; the class-scoped fix) and a decoder's module shape, with the harness and without.
live_engine() {
  local dir=$runs/live-engine t0 code
  local files=(test_embed_module_scoped.py test_embed_class_scoped.py test_decoder_module_scoped.py)
  rm -rf "$dir" && mkdir -p "$dir/src"
  cp tests/unit/vllm_live_engine/shared.py "$dir/src/"
  cp tests/unit/vllm_live_engine/embed_module_scoped.py "$dir/src/${files[0]}"
  cp tests/unit/vllm_live_engine/embed_class_scoped.py "$dir/src/${files[1]}"
  cp "$here/live_engine/decoder_module_scoped.py" "$dir/src/${files[2]}"
  export LIVE_ENGINE_SHARED=${LIVE_ENGINE_SHARED:-0.92} LIVE_ENGINE_OWN=${LIVE_ENGINE_OWN:-0.92}
  step "(c) #52570 with the harness: module scope blocked and named, class scope passes"
  t0=$SECONDS
  (cd "$dir/src" && PYTHONPATH=$root:$PYTHONPATH bounded 200 python3 -m pytest -p no:cacheprovider -rfE \
    --durations=0 --harness --harness-ledger-dir "$dir/ledger/with-harness" "${files[@]}") 2>&1 |
    tee "$dir/with-harness.log"
  code=${PIPESTATUS[0]}
  figure "#52570 with the harness: pytest exit $code in $((SECONDS - t0)) s (expected 5 passed, 2 blocked)"
  harness report "$dir" > /dev/null && cat "$dir/summary.md" >> "$OUT/figures.txt"
  step "(c) #52570 on plain vLLM (-p no:harness): the two module-scoped shapes"
  t0=$SECONDS
  (cd "$dir/src" && PYTHONPATH=$root:$PYTHONPATH bounded 160 python3 -m pytest -p no:cacheprovider -rfE \
    --durations=0 -p no:harness -p no:harness_workers "${files[0]}" "${files[2]}") 2>&1 | tee "$dir/plain.log"
  code=${PIPESTATUS[0]}
  figure "#52570 on plain vLLM: pytest exit $code in $((SECONDS - t0)) s"
  grep -E "^(FAILED|ERROR)|less than desired|test_own_engine|=+ .*(passed|failed)" "$dir/plain.log" |
    tee -a "$OUT/figures.txt"
}

part2() {
  live_engine
  if [ "$gpus" -lt 2 ]; then
    figure "(e) skipped: $gpus GPU here, so part1's runs are the one-GPU figures"
  else
    suite pooling 0 240
    suite generation 0 180
    for name in pooling generation; do
      step "(e) harness compare $name: GPU 0 alone -> GPUs $every"
      harness compare "$runs/$name-gpu0/report.json" "$runs/$name-$all/report.json" --format md |
        tee -a "$OUT/figures.txt"
      ratios "$runs/$name-gpu0/report.json" "$runs/$name-$all/report.json" | tee -a "$OUT/figures.txt"
    done
  fi
  pack live-engine pooling-gpu0 generation-gpu0
}

# ratios ONE EVERY: each phase's wall and the whole run's on every GPU over GPU 0 alone (goal: shared-engine
# phase <= 0.6, whole suite < 1)
ratios() {
  python3 - "$1" "$2" << 'PY'
import json, sys
one, every = (json.load(open(path)) for path in sys.argv[1:])
walls = [{p["name"]: p.get("wall_s") or 0.0 for p in report["phases"]} for report in (one, every)]
for name, wall in walls[0].items():
    if wall and name in walls[1]:
        print(f"(e) {name}: {walls[1][name]:.1f} s on every GPU / {wall:.1f} s on GPU 0 = {walls[1][name] / wall:.2f}")
totals = [sum(w.values()) for w in walls]
print(f"(e) whole suite: {totals[1]:.1f} s / {totals[0]:.1f} s = {totals[1] / totals[0]:.2f}")
PY
}

part3() {
  suite pooling-naive "$every" 450
  step "(b) harness compare pooling-naive -> pooling (part1's run), GPUs $every"
  harness compare "$runs/pooling-naive-$all/report.json" "$runs/pooling-$all/report.json" --format md |
    tee -a "$OUT/figures.txt"
  pack "pooling-naive-$all"
}

# (f) benchmarks/reuse.py in two calls: its run directories stay in /root/runs/reuse between them
reuse() {
  step "(f) benchmarks/reuse.py --runs $1 on GPUs $every"
  bounded "$2" python3 benchmarks/reuse.py --out "$runs/reuse" --runs "$1" 2>&1 | tee "$runs/reuse-$part.log"
  figure "reuse.py --runs $1: exit ${PIPESTATUS[0]}"
  tail -8 "$runs/reuse-$part.log" >> "$OUT/figures.txt"
}

part4() {
  reuse naive-off,shipped 540
  pack reuse reuse-part4.log
}

part5() {
  reuse naive-on,naive-history 540
  pack reuse reuse-part5.log
}

part6() {
  local platform
  for platform in cpu cuda; do
    step "(g) benchmarks/plugin_overhead.py, HARNESS_PLATFORM=$platform"
    figure "plugin_overhead.py as the $platform platform:"
    HARNESS_PLATFORM=$platform bounded 240 python3 benchmarks/plugin_overhead.py --rounds "${ROUNDS:-9}" |
      tee -a "$OUT/figures.txt"
  done
}

part7() {
  local dir=$runs/blocked
  rm -rf "$dir" && mkdir -p "$dir/src"
  cp tests/unit/vllm_live_engine/shared.py "$dir/src/"
  cp tests/unit/vllm_live_engine/embed_module_scoped.py "$dir/src/test_embed_module_scoped.py"
  export LIVE_ENGINE_SHARED=${LIVE_ENGINE_SHARED:-0.92} LIVE_ENGINE_OWN=${LIVE_ENGINE_OWN:-0.92}
  step "(c') the #52570 embedding shape with the harness: from the blocked start to its error"
  (cd "$dir/src" && PYTHONPATH=$root:$PYTHONPATH bounded 200 python3 -m pytest -p no:cacheprovider -q \
    --harness --harness-ledger-dir "$dir/ledger" test_embed_module_scoped.py) 2>&1 | tail -3
  grep -h '"runner-failed"' "$dir"/ledger/*.jsonl |
    python3 -c 'import json, sys; [print("blocked start to its error:", json.loads(l)["startup_s"], "s") for l in sys.stdin]' |
    tee -a "$OUT/figures.txt"
}

part8() {
  local dir=$runs/tp-blocked
  [ "$gpus" -ge 2 ] || { figure "(h) needs two GPUs, this machine has $gpus" && return; }
  rm -rf "$dir" && mkdir -p "$dir/src"
  cp "$here/live_engine/tp_beside_one_device.py" "$dir/src/test_tp_beside_one_device.py"
  step "(h) a TP=2 start beside a one-device engine on GPU 0, with the harness: blocked, naming both"
  (cd "$dir/src" && CUDA_VISIBLE_DEVICES=0,1 PYTHONPATH=$root:$PYTHONPATH bounded 240 python3 -m pytest \
    -p no:cacheprovider -rfE --harness --harness-ledger-dir "$dir/ledger" test_tp_beside_one_device.py) 2>&1 |
    tee "$dir/pytest.log" | tail -5
  grep -h '"runner-failed"' "$dir"/ledger/*.jsonl |
    python3 -c 'import json, sys; [print("(h) blocked:", json.loads(l)["startup_s"], "s:", json.loads(l)["error"]) for l in sys.stdin]' |
    tee -a "$OUT/figures.txt"
  pack tp-blocked
}

main() {
  install_project
  "$part"
  figure "$part done in $SECONDS s"
}
main 2>&1 | tee -a "$OUT/$part.log"
