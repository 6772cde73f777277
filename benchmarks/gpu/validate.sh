#!/usr/bin/env bash
# Backs docs/validation.md § Without vLLM: proves harness's CUDA paths on an NVIDIA machine in one go
# (NVML against torch, one worker per GPU, a module-scoped hold blocked and named, a leak found); each
# figure is a line of OUT_DIR/figures.txt.
#   benchmarks/gpu/validate.sh OUT_DIR [POOLING_MODEL]
# Needs harness, nox and pytest-xdist/timeout importable (the device call installs them from wheels first).
# Every step writes its own files into OUT_DIR and a line into OUT_DIR/figures.txt; a failing step does
# not stop the others.
set -uo pipefail
out=$(realpath -m "${1:?usage: validate.sh OUT_DIR [POOLING_MODEL]}"); model=${2:-}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 HARNESS_PLATFORM=cuda
figure() { echo "$*" | tee -a "$out/figures.txt"; }
step() { echo; echo "=== $* ($(date -u +%T))"; }
seconds() { python3 -c "import time; print(f'{time.time() - $1:.1f}')"; }

step "0. machine"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv | tee "$out/nvidia-smi.csv"
python3 -c "import torch, pynvml; pynvml.nvmlInit(); print('torch', torch.__version__, 'cuda devices', torch.cuda.device_count(), 'driver', pynvml.nvmlSystemGetDriverVersion())" | tee -a "$out/figures.txt"

step "1. harness doctor --json vs torch.cuda.mem_get_info"
harness doctor --json > "$out/doctor.json"; figure "doctor exit $?"
python3 "$here/memory_agreement.py" "$out/doctor.json" | tee "$out/memory-agreement.json"
CUDA_VISIBLE_DEVICES=abc harness doctor > /dev/null 2> "$out/doctor-bad-mask.txt"
figure "doctor with CUDA_VISIBLE_DEVICES=abc: exit $? -> $(cat "$out/doctor-bad-mask.txt")"

step "2. nox --no-venv -s cuda_pooling (HF paths on CUDA; vLLM tests skip)"
t=$(date +%s.%N)
HARNESS_POOLING_MODELS=$model nox --no-venv -s cuda_pooling -- -rs 2>&1 | tee "$out/cuda_pooling.log" | tail -40
figure "nox cuda_pooling exit ${PIPESTATUS[0]} in $(seconds "$t") s"
cp -r harness-out/pooling-cuda "$out/pooling-cuda" 2>/dev/null

step "3. one worker per GPU: -n auto on all GPUs vs on GPU 0 alone, GPU-bound tests"
cd "$here/suite"
for visible in "0" "all"; do
  if [ "$visible" = all ]; then unset CUDA_VISIBLE_DEVICES; else export CUDA_VISIBLE_DEVICES=0; fi
  t=$(date +%s.%N)
  python3 -m pytest test_heavy.py -n auto -q -p no:cacheprovider --harness-ledger-dir "$out/scaling-$visible" 2>&1 | tail -4
  figure "heavy suite, visible=$visible: wall $(seconds "$t") s"
done
unset CUDA_VISIBLE_DEVICES
python3 - "$out" <<'PY' | tee -a "$out/figures.txt"
import sys
from harness.ledger import read
for visible in ("0", "all"):
    ledger = read(f"{sys.argv[1]}/scaling-{visible}")
    workers = sorted((w["worker"], w.get("mask"), tuple(w.get("devices") or ())) for w in ledger.workers)
    print(f"visible={visible}: workers {workers}; tests per device",
          {d: sum(t.get("device") == d for t in ledger.tests) for d in {t.get('device') for t in ledger.tests}})
PY

step "4. a real VRAM hold: module scope blocked with the fixture named, class scope passes, a leak found"
for shape in hold_module hold_class leak; do
  t=$(date +%s.%N)
  python3 -m pytest "$shape.py" -q -p no:cacheprovider --harness-ledger-dir "$out/$shape" 2>&1 | tee "$out/$shape.log" | tail -25
  figure "$shape: exit ${PIPESTATUS[0]} in $(seconds "$t") s"
done
python3 - "$out" <<'PY' | tee -a "$out/figures.txt"
import sys
from harness.ledger import read
for shape in ("hold_module", "hold_class", "leak"):
    ledger = read(f"{sys.argv[1]}/{shape}")
    for r in ledger.records:
        print(f"{shape}: {r['model']} outcome={r['outcome']} startup_s={r.get('startup_s')} "
              f"fixture={r.get('fixture')} error={r.get('error')} holders={r.get('holders')}")
    for f in ledger.findings:
        print(f"{shape}: finding {f['type']}: {f['message']}")
PY
cd - > /dev/null

step "5. the plugin's overhead on this host"
python3 benchmarks/plugin_overhead.py --rounds 5 2>&1 | tee -a "$out/figures.txt"
echo; echo "=== done ($(date -u +%T))"
