"""Backs docs/validation.md § Real vLLM 0.26.0 (via real_vllm.sh part2): vLLM PR #52570's shape with a
decoder, a module-scoped engine still alive when a later test builds its own.

A decoder's KV cache takes the engine's whole share of the GPU, so vLLM alone fails the second start
("Free memory on device ... is less than desired GPU memory utilization") without naming what holds the
memory; the harness blocks it, naming the fixture. real_vllm.sh runs it beside the CPU shapes of
tests/unit/vllm_live_engine (copied as test_*.py with their shared.py); the model is the generation
suite's tiny Llama.
"""

import pytest
from shared import OWN, SHARED

from tests.models.conftest import minilm_path
from tests.models.generation.conftest import build


@pytest.fixture(scope="module")
def decoder(tmp_path_factory) -> str:
    return build("llama", minilm_path(), tmp_path_factory.mktemp("llama"))


def engine(model: str, utilization: float):
    from vllm import LLM

    return LLM(
        model, dtype="float32", max_model_len=128, enforce_eager=True, gpu_memory_utilization=utilization
    )


def generate(llm) -> list[int]:
    from vllm import SamplingParams

    greedy = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    [output] = llm.generate(["a module-scoped engine"], greedy, use_tqdm=False)
    return list(output.outputs[0].token_ids)


@pytest.fixture(scope="module")
def generator(decoder):
    llm = engine(decoder, SHARED)
    yield llm
    llm.llm_engine.engine_core.shutdown()


def test_shared_generation(generator):
    assert len(generate(generator)) == 4


def test_own_engine(decoder):
    llm = engine(decoder, OWN)
    assert len(generate(llm)) == 4
    llm.llm_engine.engine_core.shutdown()
