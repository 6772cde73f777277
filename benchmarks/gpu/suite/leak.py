"""Backs docs/validation.md § Without vLLM (via validate.sh): a runner whose test leaks a CUDA tensor on
purpose; its stop must be a "memory not released" finding."""

import torch

LEAKED = []


def test_leaky_engine(vram_engine):
    engine = vram_engine("leaky-engine", gpu_memory_utilization=0.2)
    LEAKED.append(torch.empty(8 * 2**30, dtype=torch.uint8, device="cuda"))
    engine.close()
