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
