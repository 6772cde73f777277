"""``VllmRunner`` (``vllm_runner``) and ``HfRunner`` (``hf_runner``): the two model runners a suite
compares, as context managers (``shared``: what both use).

Their API is vLLM 0.32's ``tests/conftest.py`` for text models (names, arguments, return shapes), so a test
written against vLLM's conftest runs against the harness's ``vllm_runner`` / ``hf_runner`` unchanged:
``generate`` and ``generate_greedy`` give prompt + output as vLLM does, ``generate_greedy_logprobs`` vLLM's
``Logprob`` dicts, ``HfRunner.generate_greedy_logprobs_limit`` the HF side of that comparison.
Differences kept on purpose (README, "Adopting the harness in a vLLM-style tree"): ``enforce_eager`` is True,
the CPU's ``gpu_memory_utilization`` is 0.3, ``max_model_len`` is the model's, vLLM's other engine defaults
stand; no multimodal inputs; HF logprobs come from the logits ``generate`` returns; ``embed`` and
``token_embed`` on ``HfRunner`` are the harness's own.

When the harness plugin is active, ``harness.tracking`` records every ``vllm.LLM`` construction and engine
shutdown and every HF model load, whoever builds them; ``HfRunner`` only widens its load's start to take in
the move to the device. What runners own is a start with known settings and a teardown in the order that
gives memory back (see ``close``).
vllm, torch and transformers are imported inside methods: importing this module costs nothing.
"""

from harness.runners.hf_runner import HfRunner
from harness.runners.vllm_runner import VllmRunner

__all__ = ["HfRunner", "VllmRunner"]
