"""HF reuse (``reuse_hf``) with the real MiniLM: an unchanged, unused model is handed on; a model a test
changed (weights, training mode, hooks) or still uses is loaded again."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import ledger

DATA = Path(__file__).parent / "hf_reuse"
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None, reason="needs sentence-transformers"
)


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> tuple[object, dict[str, str]]:
    """The three suites below in one pytest session (one import of torch and transformers, not three),
    HF reuse on: its ledger and each test's outcome. Each suite's models are its own (MiniLM, and a tiny
    GPT-2 checkpoint in a folder of each suite's), so no model is handed from one suite to another."""
    root = tmp_path_factory.mktemp("hf-reuse")
    shutil.copy(DATA / "suite.py", root / "test_hf.py")
    (root / "test_tiny.py").write_text(TINY.format(folder=str(root / "tiny-checkpoint")))
    (root / "test_own.py").write_text(OWN_RUNNER.format(folder=str(root / "own-checkpoint")))
    env = {**os.environ, "HARNESS_PLATFORM": "cpu", "HARNESS_REUSE_HF": "1"}
    args = ["--harness", "--harness-ledger-dir", "ledger", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    merged = ledger.read(root / "ledger")
    outcomes = {t["nodeid"]: t["outcome"] for t in merged.tests}
    assert outcomes, done.stdout[-3000:] + done.stderr[-3000:]
    return merged, outcomes


def _of(items, file: str) -> list:
    """The records, reuses or refusals of one suite's tests."""
    return [item for item in items if item["test"].startswith(f"{file}::")]


def _passed(outcomes: dict[str, str], file: str, count: int) -> None:
    mine = {nodeid: outcome for nodeid, outcome in outcomes.items() if nodeid.startswith(f"{file}::")}
    assert list(mine.values()) == ["passed"] * count, mine


def test_only_an_unchanged_unused_model_is_handed_on(ran):
    everything, outcomes = ran
    _passed(outcomes, "test_hf.py", 7)
    merged = SimpleNamespace(
        records=_of(everything.records, "test_hf.py"),
        reuses=_of(everything.reuses, "test_hf.py"),
        refusals=_of(everything.refusals, "test_hf.py"),
    )
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


def test_a_rewritten_local_checkpoint_or_an_edited_generation_config_is_loaded_again(ran):
    """A local checkpoint was keyed by its path alone (the stale model handed on after a rewrite), and the
    generation config was not in the digest (an edit carried over to the next test)."""
    everything, outcomes = ran
    _passed(outcomes, "test_tiny.py", 4)
    merged = SimpleNamespace(
        records=_of(everything.records, "test_tiny.py"),
        reuses=_of(everything.reuses, "test_tiny.py"),
        refusals=_of(everything.refusals, "test_tiny.py"),
    )
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


def test_the_harnesss_own_hf_runner_gets_hf_reuse(ran):
    """Its load was recorded as one start with the from_pretrained inside it, so nothing was ever kept."""
    everything, outcomes = ran
    _passed(outcomes, "test_own.py", 2)
    assert len(_of(everything.records, "test_own.py")) == 1
    assert [r["test"].split("::")[1] for r in _of(everything.reuses, "test_own.py")] == ["test_again"]
