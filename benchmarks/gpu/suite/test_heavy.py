"""Backs docs/validation.md § Without vLLM (via validate.sh): GPU-bound work per test, so wall time on 2
GPUs vs 1 measures the worker-per-GPU pinning, not Python."""

import pytest
import torch

SIZE = 8192
PRODUCTS = 1500  # bf16 8192^3 products: ~1.6 PFLOP, ~2.5 s a test at ~650 TFLOP/s


@pytest.mark.parametrize("case", range(32))
def test_matmul_work(case):
    torch.manual_seed(case)
    a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16)
    for _ in range(PRODUCTS):
        c = a @ b
    torch.cuda.synchronize()
    assert torch.isfinite(c.float().sum())
