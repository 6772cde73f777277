"""Backs docs/validation.md § Two GPUs (via real_vllm.sh part8): a tensor-parallel start beside a live
one-device engine.

A module-scoped engine holds 0.6 of GPU 0; a later test starts one engine over GPUs 0 and 1 at 0.6 of
each. On GPU 0 the two shares pass the device, so the harness blocks the start at once, naming the fixture
and the device; plain vLLM would wait for, or fail on, memory that the fixture keeps until the module ends.
"""

import pytest

from tests.models.conftest import minilm_path

SHARE = 0.6


def engine(tensor_parallel_size: int):
    from vllm import LLM

    return LLM(
        minilm_path(),
        runner="pooling",
        enforce_eager=True,
        gpu_memory_utilization=SHARE,
        tensor_parallel_size=tensor_parallel_size,
    )


@pytest.fixture(scope="module")
def one_device():
    llm = engine(1)
    yield llm
    llm.llm_engine.engine_core.shutdown()


def test_one_device_engine(one_device):
    (output,) = one_device.embed(["a module-scoped engine on GPU 0"], use_tqdm=False)
    assert len(output.outputs.embedding) == 384


def test_tensor_parallel_beside_it():
    llm = engine(2)
    llm.llm_engine.engine_core.shutdown()
