"""Backs docs/validation.md § Without vLLM (via validate.sh): the vLLM PR #52570 shape on real VRAM, a
module-scoped fixture holds memory a later test needs; blocked with the fixture named."""

import pytest
import torch


@pytest.fixture(scope="module")
def shared_block():
    total = torch.cuda.mem_get_info()[1]
    block = torch.empty(int(0.6 * total), dtype=torch.uint8, device="cuda")
    yield block
    del block
    torch.cuda.empty_cache()


def test_uses_the_shared_block(shared_block):
    assert shared_block.numel() > 0


def test_own_engine(vram_engine):
    engine = vram_engine("own-engine", gpu_memory_utilization=0.7)
    engine.close()
