"""HF reuse (``reuse_hf``) with the real MiniLM: an unchanged, unused model is handed on; a model a test
changed (weights, training mode, hooks) or still uses is loaded again."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from harness import ledger

pytest_plugins = ["pytester"]
DATA = Path(__file__).parent / "hf_reuse"
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None, reason="needs sentence-transformers"
)


def test_only_an_unchanged_unused_model_is_handed_on(pytester, monkeypatch):
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    monkeypatch.setenv("HARNESS_REUSE_HF", "1")
    shutil.copy(DATA / "suite.py", pytester.path / "test_hf.py")
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess(
        "--harness", "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=7)
    merged = ledger.read(directory)
    name = {r["id"]: r["test"].split("::")[1] for r in merged.records}
    assert [(name[r["runner"]], r["test"].split("::")[1]) for r in merged.reuses] == [
        ("test_load", "test_handed_on_then_changed"),
        ("test_changed_weights_are_not_handed_on", "test_training_mode_is_put_back"),
        ("test_sentence_transformer_handed_on", "test_sentence_transformer_handed_on"),
    ]
    assert [(name[r["runner"]], r["test"].split("::")[1]) for r in merged.refusals] == [
        ("test_load", "test_changed_weights_are_not_handed_on"),
        ("test_changed_weights_are_not_handed_on", "test_a_hook_is_not_handed_on"),
    ]
    assert all(r["reason"].startswith("a test changed it") for r in merged.refusals)
    assert all(r["saved_s"] > 0 for r in merged.reuses)
    # loaded: the first, after each change, beside the model still in use, and the first SentenceTransformer
    assert [r["config"]["class"] for r in merged.records] == ["BertModel"] * 4 + ["SentenceTransformer"]
    assert {r["outcome"] for r in merged.records} == {"started"}


TINY = """
import weakref

import torch
from transformers import GPT2Config, GPT2LMHeadModel

FOLDER = {folder!r}
last = []


def save(scale):
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=16))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(scale)
    model.save_pretrained(FOLDER)


def load():
    model = GPT2LMHeadModel.from_pretrained(FOLDER)
    handed = any(ref() is model for ref in last)
    last.append(weakref.ref(model))
    return model, handed


def test_first():
    save(1.0)
    model, handed = load()
    assert not handed


def test_rewritten_checkpoint_is_another_model():
    save(2.0)  # the same folder, other weights
    model, handed = load()
    assert not handed


def test_handed_on_then_generation_config_edited():
    model, handed = load()
    assert handed
    model.generation_config.max_new_tokens = 2


def test_an_edited_generation_config_is_not_handed_on():
    model, handed = load()
    assert not handed and model.generation_config.max_new_tokens != 2
"""


def test_a_rewritten_local_checkpoint_or_an_edited_generation_config_is_loaded_again(pytester, monkeypatch):
    """A local checkpoint was keyed by its path alone (the stale model handed on after a rewrite), and the
    generation config was not in the digest (an edit carried over to the next test)."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    monkeypatch.setenv("HARNESS_REUSE_HF", "1")
    pytester.makepyfile(test_tiny=TINY.format(folder=str(pytester.path / "checkpoint")))
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess(
        "--harness", "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=4)
    merged = ledger.read(directory)
    assert [r["test"].split("::")[1] for r in merged.records] == [
        "test_first",
        "test_rewritten_checkpoint_is_another_model",
        "test_an_edited_generation_config_is_not_handed_on",
    ]
    assert [r["test"].split("::")[1] for r in merged.reuses] == [
        "test_handed_on_then_generation_config_edited"
    ]
    [refusal] = merged.refusals
    assert refusal["reason"].startswith("a test changed it")


OWN_RUNNER = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from harness.runners import HfRunner

FOLDER = {folder!r}
SEEN = []


def test_first():
    torch.manual_seed(0)
    shape = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=16)
    GPT2LMHeadModel(shape).save_pretrained(FOLDER)
    with HfRunner(FOLDER, skip_tokenizer_init=True) as runner:
        SEEN.append(id(runner.model))


def test_again():
    with HfRunner(FOLDER, skip_tokenizer_init=True) as runner:
        SEEN.append(id(runner.model))
    assert SEEN[0] == SEEN[1]
"""


def test_the_harnesss_own_hf_runner_gets_hf_reuse(pytester, monkeypatch):
    """Its load was recorded as one start with the from_pretrained inside it, so nothing was ever kept."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    monkeypatch.setenv("HARNESS_REUSE_HF", "1")
    pytester.makepyfile(test_own=OWN_RUNNER.format(folder=str(pytester.path / "checkpoint")))
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess(
        "--harness", "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=2)
    merged = ledger.read(directory)
    assert len(merged.records) == 1
    assert [r["test"].split("::")[1] for r in merged.reuses] == ["test_again"]
