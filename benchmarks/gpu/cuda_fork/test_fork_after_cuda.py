"""Backs docs/validation.md § A forked engine after CUDA init: the shape of issue 60 (benchmarks/gpu/
cuda_fork.py runs it): a test process that touches CUDA without
torch's flag (an HF model loaded on the CPU, then ``torch.cuda.is_available()``), then a vLLM engine.
Each test prints what the driver says (``harness.platform.cuda_fork``) beside torch's flag."""

import os

import torch

from harness.platform import cuda_fork

MODEL = os.environ["FORK_MODEL"]


def said(where: str) -> None:
    print(
        f"{where}: driver initialized {cuda_fork.driver_initialized()}, torch {torch.cuda.is_initialized()}"
    )


def test_hf_model_on_the_cpu():
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(MODEL, torch_dtype=torch.float32)
    assert model(torch.tensor([[1, 2, 3]])).logits.shape[-1] > 0
    said("after an HF model on the CPU")


def test_cuda_available():
    assert torch.cuda.is_available()
    said("after torch.cuda.is_available()")


def test_engine():
    from vllm import LLM, SamplingParams

    llm = LLM(
        MODEL, dtype="float32", max_model_len=256, enforce_eager=True, gpu_memory_utilization=0.3, seed=0
    )
    [output] = llm.generate(["a forked engine"], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    assert output.outputs[0].token_ids
    llm.llm_engine.engine_core.shutdown()
