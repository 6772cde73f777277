"""Backs docs/validation.md § Without vLLM: the GPU validation suites (benchmarks/gpu/validate.sh runs
them on the NVIDIA machine, not in CI, and prints their figures).

vLLM's CUDA wheel cannot be sent to the device machine, so ``VramEngine`` stands in for a vLLM engine:
it declares ``gpu_memory_utilization`` and takes that share of the device in one allocation, as vLLM's
KV cache does at start, through the same recording path an instrumented ``vllm.LLM`` takes.
"""

from __future__ import annotations

import pytest
import torch

from harness.tracking import starts

GIB = 2**30


class VramEngine:
    def __init__(self, name: str, gpu_memory_utilization: float):
        fraction = gpu_memory_utilization
        config = {"model": name, "gpu_memory_utilization": fraction}
        with starts.starting("engine", name, config, fraction=fraction) as run:
            free, total = torch.cuda.mem_get_info()
            need = int(fraction * total)
            if free < need:  # vLLM's own refusal, after its start-up cost
                raise ValueError(
                    f"Free memory on device ({free / GIB:.2f} GiB) is less than desired "
                    f"GPU memory utilization ({fraction}, {need / GIB:.2f} GiB)"
                )
            self.kv_cache = torch.empty(need, dtype=torch.uint8, device="cuda")
        self.run = run

    def close(self) -> None:
        del self.kv_cache
        torch.cuda.empty_cache()
        if self.run is not None:
            self.run.stop()


@pytest.fixture
def vram_engine():
    return VramEngine
