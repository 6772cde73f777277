"""Pooling models on vLLM against sentence-transformers / transformers, one engine start per configuration.

Shape (the fix of vLLM PR #52570): tests that can share an engine live in a class with a class-scoped
engine, so the engine is shut down when the class ends; the float32 comparison that needs its own runners
is a module-level ``standalone`` test after the classes, and it can start because nothing is alive then.
vLLM serves one pooling task per engine, so pooled and per-token embeddings are two engine configurations
and two classes, one after the other (two live engines would each claim their memory share on a GPU).

The HF reference is computed once per model and run, and kept across runs (``harness.references``), in a
session fixture that closes its model before returning: it is data from then on, never a live model beside
an engine. On a GPU it is computed in a child process (``in_child``), so CUDA is never initialised in the
test process and vLLM can fork its engine process instead of spawning one.

The ``distributed(num_gpus=2)`` test runs one engine over two devices in the multi-GPU phase.
"""

import numpy as np
import pytest

from harness.references import reference as computed_once
from harness.runners import HfRunner, VllmRunner
from tests.models.conftest import ieee_float32

QUERY = "What is the capital of France?"
CORPUS = [
    "The mitochondria is the powerhouse of the cell.",
    "Paris is the capital and largest city of France.",
    "Photosynthesis turns sunlight into chemical energy in plants.",
    "The Great Wall of China stretches across mountains and deserts.",
]
RELEVANT = 1  # CORPUS[RELEVANT] answers QUERY
QUERIES = [QUERY, "Which organelle produces energy for the cell?"]  # N:N pairs with CORPUS[1], CORPUS[0]
LONG_TEXT = "one two three four five six seven eight nine ten eleven twelve"
TEXTS = [QUERY, *CORPUS, QUERIES[1], LONG_TEXT]
TRUNCATE_TO = 5


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def arrays(tensors) -> list[np.ndarray]:
    """vLLM's per-token tensors as float32 NumPy arrays."""
    return [t.float().cpu().numpy() for t in tensors]


def unit_rows(tokens: np.ndarray) -> np.ndarray:
    return tokens / np.linalg.norm(tokens, axis=-1, keepdims=True)


def maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """Late interaction (ColBERT): each query token's best match among the document's tokens, summed."""
    return float((unit_rows(query) @ unit_rows(document).T).max(axis=1).sum())


def threshold(runner: VllmRunner) -> float:
    """Cosine floor against the float32 reference: 0.999 for a float32 engine, 0.99 for half precision."""
    import torch

    return 0.999 if runner.llm.llm_engine.model_config.dtype == torch.float32 else 0.99


def sentence_transformers_reference(model: str) -> dict:
    """sentence-transformers' float32 pooled and per-token embeddings of TEXTS, as NumPy, model closed."""
    with HfRunner(model, dtype="float32", is_sentence_transformer=True) as hf:
        return {
            "embed": dict(zip(TEXTS, np.asarray(hf.embed(TEXTS)), strict=True)),
            "tokens": dict(zip(TEXTS, hf.token_embed(TEXTS), strict=True)),
        }


def hf_unit_token_embeddings(model: str) -> dict:
    """transformers' float32 per-token embeddings of TEXTS, unit rows, with IEEE float32 matmuls (PyTorch's
    default, stated because the comparison that uses them is exact)."""
    import torch
    from transformers import AutoModel

    torch.backends.cuda.matmul.allow_tf32 = False
    with HfRunner(model, dtype="float32", auto_cls=AutoModel) as hf:
        return {text: unit_rows(t) for text, t in zip(TEXTS, hf.token_embed(TEXTS), strict=True)}


@pytest.fixture(scope="session")
def reference(pooling_model, session_cache):
    """The sentence-transformers reference of a model, computed once a run and kept across runs
    (``harness.references``; in a child process on a GPU)."""
    key = ("reference", pooling_model)
    if key not in session_cache:
        session_cache[key] = computed_once(sentence_transformers_reference, pooling_model)
    return session_cache[key]


@pytest.fixture(scope="class")
def embed_engine(pooling_model):
    """The pooled-embedding engine of a class: shut down when the class ends."""
    with VllmRunner(pooling_model, runner="pooling") as runner:
        yield runner


@pytest.fixture(scope="class")
def token_engine(pooling_model):
    """The per-token (late-interaction) engine of a class: shut down when the class ends."""
    from vllm.config import PoolerConfig

    with VllmRunner(
        pooling_model, runner="pooling", pooler_config=PoolerConfig(task="token_embed")
    ) as runner:
        yield runner


@pytest.fixture(scope="class")
def tokens(token_engine):
    return dict(zip(TEXTS, arrays(token_engine.token_embed(TEXTS)), strict=True))


def test_reference_tokens_pool_to_the_sentence_embedding(reference):
    """The reference is self-consistent: its tokens, mean-pooled and normalised, are its embedding."""
    for text in TEXTS:
        pooled = reference["tokens"][text].mean(axis=0)
        assert cosine(pooled, reference["embed"][text]) > 0.9999, text


@pytest.mark.vllm
class TestSharedEngine:
    """Pooled embeddings: one engine per model for every test of the class."""

    def test_embeddings_match_sentence_transformers(self, embed_engine, reference):
        floor = threshold(embed_engine)
        for text, embedding in zip(TEXTS, embed_engine.embed(TEXTS), strict=True):
            assert cosine(embedding, reference["embed"][text]) >= floor, text

    def test_relevant_document_ranks_first(self, embed_engine):
        scores = embed_engine.score(QUERY, CORPUS)
        assert int(np.argmax(scores)) == RELEVANT, scores

    def test_score_api_is_cosine_of_embeddings(self, embed_engine):
        """The scoring API of an embedding model (bi-encoder) against NumPy cosine, 1:1, 1:N and N:N."""
        embedding = dict(zip(TEXTS, embed_engine.embed(TEXTS), strict=True))
        pairs = [CORPUS[1], CORPUS[0]]
        calls = {
            "1:1": (embed_engine.score(QUERY, CORPUS[1]), [(QUERY, CORPUS[1])]),
            "1:N": (embed_engine.score(QUERY, CORPUS), [(QUERY, d) for d in CORPUS]),
            "N:N": (embed_engine.score(QUERIES, pairs), list(zip(QUERIES, pairs, strict=True))),
        }
        for shape, (got, wanted_pairs) in calls.items():
            want = [cosine(embedding[q], embedding[d]) for q, d in wanted_pairs]
            np.testing.assert_allclose(got, want, atol=1e-4, err_msg=shape)

    def test_truncation_equals_the_input_cut_to_k_tokens(self, embed_engine):
        cut = embed_engine.llm.get_tokenizer()(LONG_TEXT, truncation=True, max_length=TRUNCATE_TO)[
            "input_ids"
        ]
        assert len(cut) == TRUNCATE_TO
        (truncated,) = embed_engine.llm.embed(
            [LONG_TEXT], tokenization_kwargs={"truncate_prompt_tokens": TRUNCATE_TO}, use_tqdm=False
        )
        assert truncated.prompt_token_ids == cut
        (expected,) = embed_engine.embed([{"prompt_token_ids": cut}])
        np.testing.assert_allclose(truncated.outputs.embedding, expected, atol=1e-6)
        (whole,) = embed_engine.embed([LONG_TEXT])
        assert cosine(whole, expected) < 0.99, "truncation changed nothing"

    def test_truncation_beyond_the_model_limit_raises(self, embed_engine):
        from vllm.exceptions import VLLMValidationError

        limit = embed_engine.llm.llm_engine.model_config.max_model_len
        with pytest.raises(VLLMValidationError) as error:
            embed_engine.embed([LONG_TEXT], tokenization_kwargs={"truncate_prompt_tokens": limit + 1})
        assert f"truncate_prompt_tokens={limit + 1} cannot be greater than" in str(error.value)
        assert f"= {limit}" in str(error.value)

    def test_unsupported_task_raises_and_the_engine_still_answers(self, embed_engine, reference):
        with pytest.raises(ValueError, match="Classification API is not supported by this model"):
            embed_engine.classify([QUERY])
        with pytest.raises(ValueError, match=r"LLM.generate\(\) is only supported for generative models"):
            embed_engine.generate_greedy([QUERY], max_tokens=4)
        (embedding,) = embed_engine.embed([QUERY])
        assert cosine(embedding, reference["embed"][QUERY]) >= threshold(embed_engine)


@pytest.mark.vllm
class TestLateInteraction:
    """Per-token embeddings and MaxSim scoring: the token_embed engine, one per model."""

    def test_token_embeddings_shape_and_direction(self, token_engine, tokens, reference):
        tokenizer = token_engine.llm.get_tokenizer()
        floor = threshold(token_engine)
        for text, got in tokens.items():
            want = reference["tokens"][text]
            assert got.shape == (len(tokenizer(text)["input_ids"]), want.shape[1]), text
            np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)
            assert min(cosine(g, w) for g, w in zip(got, want, strict=True)) >= floor, text

    def test_token_embeddings_are_consistent_with_the_pooled_embedding(self, token_engine, tokens, reference):
        """Scaled back to the reference's token norms, vLLM's tokens mean-pool to the sentence embedding."""
        for text, got in tokens.items():
            norms = np.linalg.norm(reference["tokens"][text], axis=1, keepdims=True)
            assert cosine((got * norms).mean(axis=0), reference["embed"][text]) >= threshold(token_engine), (
                text
            )

    def test_maxsim_scores_match_numpy(self, token_engine, tokens):
        """vLLM's late-interaction scoring, 1:1, 1:N and N:N, against MaxSim of its own token embeddings."""
        one_to_one = token_engine.score(QUERY, CORPUS[1])
        one_to_n = token_engine.score(QUERY, CORPUS)
        n_to_n = token_engine.score(QUERIES, [CORPUS[1], CORPUS[0]])
        np.testing.assert_allclose(one_to_one, [maxsim(tokens[QUERY], tokens[CORPUS[1]])], rtol=1e-4)
        np.testing.assert_allclose(one_to_n, [maxsim(tokens[QUERY], tokens[d]) for d in CORPUS], rtol=1e-4)
        want = [maxsim(tokens[QUERIES[0]], tokens[CORPUS[1]]), maxsim(tokens[QUERIES[1]], tokens[CORPUS[0]])]
        np.testing.assert_allclose(n_to_n, want, rtol=1e-4)

    def test_maxsim_matches_the_reference(self, token_engine, reference):
        floor = threshold(token_engine)
        got = token_engine.score(QUERY, CORPUS)
        want = [maxsim(reference["tokens"][QUERY], reference["tokens"][d]) for d in CORPUS]
        np.testing.assert_allclose(got, want, rtol=1 - floor)

    def test_relevant_document_ranks_first(self, token_engine):
        scores = token_engine.score(QUERY, CORPUS)
        assert int(np.argmax(scores)) == RELEVANT, scores

    def test_unsupported_task_raises_and_the_engine_still_answers(self, token_engine, tokens):
        with pytest.raises(ValueError, match="Classification API is not supported by this model"):
            token_engine.classify([QUERY])
        (again,) = arrays(token_engine.token_embed([QUERY]))
        np.testing.assert_allclose(again, tokens[QUERY], atol=1e-6)


@pytest.mark.vllm
@pytest.mark.standalone
def test_float32_token_embeddings_match_hf(pooling_model):
    """Its own float32 runners (the seed's ``test_colbert_hf_comparison``): HF first, closed, then vLLM.

    MaxSim within ``rtol=1e-4`` is a float32 claim, so TF32 is off on both sides (``ieee_float32``).
    """
    from vllm.config import PoolerConfig

    want = computed_once(hf_unit_token_embeddings, pooling_model)
    with (
        ieee_float32(),
        VllmRunner(
            pooling_model, runner="pooling", dtype="float32", pooler_config=PoolerConfig(task="token_embed")
        ) as vllm,
    ):
        got = dict(zip(TEXTS, arrays(vllm.token_embed(TEXTS)), strict=True))
        scores = vllm.score(QUERY, CORPUS)
    for text in TEXTS:
        assert got[text].shape == want[text].shape, text
        assert min(cosine(g, w) for g, w in zip(got[text], want[text], strict=True)) >= 0.9999, text
    np.testing.assert_allclose(scores, [maxsim(want[QUERY], want[d]) for d in CORPUS], rtol=1e-4)


@pytest.mark.vllm
@pytest.mark.distributed(num_gpus=2)
def test_tensor_parallel_embeddings_match_sentence_transformers(pooling_model, reference):
    """One engine over two devices (``tensor_parallel_size=2``), in the multi-GPU phase, against the same
    reference as the one-device engine."""
    with VllmRunner(pooling_model, runner="pooling", tensor_parallel_size=2) as engine:
        floor = threshold(engine)
        for text, embedding in zip(TEXTS, engine.embed(TEXTS), strict=True):
            assert cosine(embedding, reference["embed"][text]) >= floor, text
        scores = engine.score(QUERY, CORPUS)
    assert int(np.argmax(scores)) == RELEVANT, scores
