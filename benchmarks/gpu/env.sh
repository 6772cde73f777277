# shellcheck shell=bash
# Sourced by every command on the GPU machine after `benchmarks/gpu/stage.sh install`: the project (which
# real_vllm.sh installs into /tmp/harness-site) and the staged wheels before the image's packages, the hub
# offline, and vLLM's FlashInfer sampler off: flashinfer is not staged, and without this the engine
# process dies with "No module named 'flashinfer'".
export PYTHONPATH=/tmp/harness-site:${SITE:-/tmp/site}${PYTHONPATH:+:$PYTHONPATH}
export PATH=/tmp/harness-site/bin:${SITE:-/tmp/site}/bin:$PATH
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
