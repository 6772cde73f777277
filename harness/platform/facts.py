"""What the harness knows of each platform by its name, before or without detecting one: the names, which
are GPUs, vLLM's name for each, the ``[tool.harness]`` defaults each changes and vLLM's memory share on
each. Every other module (the settings, the report, the runners, the reuse pool, the noxfile) takes these
facts from here. The standard library only: the noxfile reads this file without the harness's
dependencies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple


class Facts(NamedTuple):
    gpu: bool  # a device apart from the host (False: the CPU platform)
    vllm_backend: str  # vLLM CI's name for it as a backend (its flaky detector's quarantined_tests.json)
    settings: Mapping[str, object]  # the [tool.harness] defaults it changes (the user's keys still win)
    # vLLM's gpu_memory_utilization where the harness's runners set one (None: vLLM's own default)
    vllm_memory_utilization: float | None = None
    # whether measured device memory shows what a live vLLM engine holds: the CPU backend reserves its KV
    # cache without touching it, so there only the declared shares can tell that engines would not fit
    engine_memory_measured: bool = True
    # whether a vLLM engine start gets cuda_fork's guard: an initialized CUDA driver does not survive a fork
    cuda_fork_guard: bool = False


FACTS: dict[str, Facts] = {
    "cuda": Facts(gpu=True, vllm_backend="cuda", settings={}, cuda_fork_guard=True),
    # freed memory lags on ROCm (vLLM's conftest waits for it to settle), and its tests run longer
    "rocm": Facts(
        gpu=True,
        vllm_backend="rocm",
        settings={"settle": True, "shutdown_timeout_s": 60.0, "test_timeout_s": 1800.0},
    ),
    # vLLM's conftest (0.33) waits for memory to settle on XPU as on ROCm: freed memory lags there too
    "xpu": Facts(gpu=True, vllm_backend="intel", settings={"settle": True}),
    # host memory moves with every process on the machine and with a process's first import of model code
    # (allocator arenas, lazily loaded modules): the GPU tolerance reads clean CPU stops as leaks. vLLM's
    # CPU backend reserves gpu_memory_utilization x NUMA node 0 at start and refuses to start when that
    # much is not free: its 0.92 default fails on a host whose node 0 holds a small part of its memory, 0.3
    # works (docs/adoption.md)
    "cpu": Facts(
        gpu=False,
        vllm_backend="cpu",
        settings={"release_tolerance_gib": 2.0},
        vllm_memory_utilization=0.3,
        engine_memory_measured=False,
    ),
}

PLATFORMS = tuple(FACTS)
GPU_PLATFORMS = tuple(name for name, facts in FACTS.items() if facts.gpu)
VLLM_BACKENDS = {name: facts.vllm_backend for name, facts in FACTS.items()}
