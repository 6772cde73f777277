"""The "before" of the before/after pair: tests/models/pooling/test_embedding.py written naively.

Every test builds its own runners, so every test pays for an engine start (~30 s on a 2-core CPU host)
and an HF load. Same checks, same helpers and texts as the shipped file, and its HF references computed
the same way (``in_child``: in a spawned child on a GPU, so CUDA stays out of the test process and vLLM
forks its engine); only the runner lifetimes differ.
Run it through ``harness run`` (or plain pytest with the plugin) to see the extra starts and seconds.
Not part of the shipped suites.
"""

import numpy as np
import pytest

from harness.runners import VllmRunner
from harness.tracking.child import in_child
from tests.models.pooling.test_embedding import (
    CORPUS,
    LONG_TEXT,
    QUERIES,
    QUERY,
    RELEVANT,
    TEXTS,
    TRUNCATE_TO,
    arrays,
    cosine,
    hf_unit_token_embeddings,
    maxsim,
    sentence_transformers_reference,
    threshold,
)

pytestmark = pytest.mark.vllm


def token_engine(model, **kwargs):
    from vllm.config import PoolerConfig

    return VllmRunner(model, runner="pooling", pooler_config=PoolerConfig(task="token_embed"), **kwargs)


def test_embeddings_match_sentence_transformers(pooling_model):
    reference = in_child(sentence_transformers_reference, pooling_model)
    want = [reference["embed"][text] for text in TEXTS]
    with VllmRunner(pooling_model, runner="pooling") as vllm:
        got = vllm.embed(TEXTS)
        floor = threshold(vllm)
    assert all(cosine(g, w) >= floor for g, w in zip(got, want, strict=True))


def test_relevant_document_ranks_first(pooling_model):
    with VllmRunner(pooling_model, runner="pooling") as vllm:
        assert int(np.argmax(vllm.score(QUERY, CORPUS))) == RELEVANT


def test_score_api_is_cosine_of_embeddings(pooling_model):
    with VllmRunner(pooling_model, runner="pooling") as vllm:
        embedding = dict(zip(TEXTS, vllm.embed(TEXTS), strict=True))
        got = vllm.score(QUERY, CORPUS)
    np.testing.assert_allclose(got, [cosine(embedding[QUERY], embedding[d]) for d in CORPUS], atol=1e-4)


def test_truncation_equals_the_input_cut_to_k_tokens(pooling_model):
    with VllmRunner(pooling_model, runner="pooling") as vllm:
        cut = vllm.llm.get_tokenizer()(LONG_TEXT, truncation=True, max_length=TRUNCATE_TO)["input_ids"]
        (truncated,) = vllm.embed([LONG_TEXT], tokenization_kwargs={"truncate_prompt_tokens": TRUNCATE_TO})
        (expected,) = vllm.embed([{"prompt_token_ids": cut}])
    np.testing.assert_allclose(truncated, expected, atol=1e-6)


def test_truncation_beyond_the_model_limit_raises(pooling_model):
    from vllm.exceptions import VLLMValidationError

    with VllmRunner(pooling_model, runner="pooling") as vllm:
        limit = vllm.llm.llm_engine.model_config.max_model_len
        with pytest.raises(
            VLLMValidationError, match=f"truncate_prompt_tokens={limit + 1} cannot be greater"
        ):
            vllm.embed([LONG_TEXT], tokenization_kwargs={"truncate_prompt_tokens": limit + 1})


def test_unsupported_task_raises_and_the_engine_still_answers(pooling_model):
    with VllmRunner(pooling_model, runner="pooling") as vllm:
        with pytest.raises(ValueError, match="Classification API is not supported by this model"):
            vllm.classify([QUERY])
        assert len(vllm.embed([QUERY])) == 1


def test_token_embeddings_shape_and_direction(pooling_model):
    reference = in_child(sentence_transformers_reference, pooling_model)
    want = [reference["tokens"][text] for text in TEXTS]
    with token_engine(pooling_model) as vllm:
        got = arrays(vllm.token_embed(TEXTS))
        floor = threshold(vllm)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert min(cosine(a, b) for a, b in zip(g, w, strict=True)) >= floor


def test_maxsim_scores_match_numpy(pooling_model):
    with token_engine(pooling_model) as vllm:
        tokens = dict(zip(TEXTS, arrays(vllm.token_embed(TEXTS)), strict=True))
        got = vllm.score(QUERIES, [CORPUS[1], CORPUS[0]])
    want = [maxsim(tokens[QUERIES[0]], tokens[CORPUS[1]]), maxsim(tokens[QUERIES[1]], tokens[CORPUS[0]])]
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_late_interaction_relevant_document_ranks_first(pooling_model):
    with token_engine(pooling_model) as vllm:
        assert int(np.argmax(vllm.score(QUERY, CORPUS))) == RELEVANT


def test_float32_token_embeddings_match_hf(pooling_model):
    reference = in_child(hf_unit_token_embeddings, pooling_model)
    want = [reference[text] for text in TEXTS]
    with token_engine(pooling_model, dtype="float32") as vllm:
        got = arrays(vllm.token_embed(TEXTS))
    for g, w in zip(got, want, strict=True):
        assert min(cosine(a, b) for a, b in zip(g, w, strict=True)) >= 0.9999
