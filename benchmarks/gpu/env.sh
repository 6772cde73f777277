# shellcheck shell=bash
# Backs docs/validation.md § Real vLLM 0.26.0 (the environment its figures ran in; prints nothing itself).
# Sourced by every command on the GPU machine after `benchmarks/gpu/stage.sh install`: the project (which
# real_vllm.sh installs into PROJECT_SITE) and the staged wheels (SITE) before the image's packages, the
# hub offline, and vLLM's FlashInfer sampler off: flashinfer is not staged, and without this the engine
# process dies with "No module named 'flashinfer'".
export PROJECT_SITE=${PROJECT_SITE:-/tmp/harness-site} SITE=${SITE:-/tmp/site}
export PYTHONPATH=$PROJECT_SITE:$SITE${PYTHONPATH:+:$PYTHONPATH}
export PATH=$PROJECT_SITE/bin:$SITE/bin:$PATH
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1

# this tree, installed as a regular package (as an image holds it) into PROJECT_SITE, replacing what was there
install_project() {
  rm -rf "${PROJECT_SITE:?}"
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$PROJECT_SITE" .
}
