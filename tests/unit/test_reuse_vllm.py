"""Engine reuse on vLLM's real CPU build (tests/unit/vllm_reuse/, one pytest run per suite, ~4 starts of
~30 s each): a warm engine is handed to the next test of its configuration, kept beside another start only
while their fractions fit, not handed on once a test changed it, nor under another ``VLLM_*`` environment,
nor to a test marked ``fresh_engine``; through the harness's ``VllmRunner`` and through a suite's own runner
shaped like vLLM's conftest's."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from harness import ledger

pytest_plugins = ["pytester"]
SUITE = Path(__file__).parent / "vllm_reuse" / "reuse_suite.py"

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM's CPU build"),
    pytest.mark.engines(9),  # each test: a run importing vLLM, four starts of two processes each
]


def test_reuse_hands_on_clean_engines_where_they_fit(pytester, monkeypatch):
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    shutil.copy(SUITE, pytester.path / "test_reuse_suite.py")
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess(
        "--harness-ledger-dir", str(directory), "--harness-reuse", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=6)
    merged = ledger.read(directory)
    vllm = [r for r in merged.records if r["kind"] == "vllm"]
    name = "test_reuse_suite.py::test_"
    assert [r["test"].removeprefix(name) for r in vllm] == [
        "first",
        "other_configuration",
        "after_the_change",
        "fresh",
    ]
    assert {r["outcome"] for r in vllm} == {"started"}  # every one stopped, the last at the session's end
    # two warm at 0.3 fit (reuse_engines = 2): the first stays warm beside the second configuration's
    assert vllm[0]["stop"] > vllm[1]["start"]
    for earlier, later in zip(vllm[1:], vllm[2:], strict=False):
        assert earlier["stop"] <= later["start"], "an engine was kept beside a start of its own configuration"
    assert [(r["test"].removeprefix(name), r["runner"]) for r in merged.reuses] == [
        ("same_configuration", vllm[0]["id"]),
        ("changes_its_engine", vllm[1]["id"]),
    ]
    startups = {r["id"]: r["startup_s"] for r in vllm}  # a reuse saves the start of the engine it hands on
    assert [r["saved_s"] for r in merged.reuses] == [startups[r["runner"]] for r in merged.reuses]
    assert None not in startups.values()
    changed = "its configuration changed while in use (no reset undoes that)"
    assert [(r["test"].removeprefix(name), r["runner"], r["reason"]) for r in merged.refusals] == [
        ("changes_its_engine", vllm[1]["id"], changed),
        ("fresh", vllm[0]["id"], "the next test asked for a fresh engine (fresh_engine marker)"),
        ("fresh", vllm[2]["id"], "the next test asked for a fresh engine (fresh_engine marker)"),
        ("fresh", vllm[3]["id"], "the test asked for a fresh engine (fresh_engine marker)"),
    ]
    result.stdout.fnmatch_lines(["*4 runner starts (vllm 4)*2 avoided by reuse*"])


OWN_RUNNER_SUITE = Path(__file__).parent / "vllm_reuse" / "own_runner_suite.py"


def test_reuse_through_a_suites_own_runner_grouped_on_the_first_run(pytester, monkeypatch):
    """vLLM's conftest shape: ``__exit__`` shuts the engine core down, and the engine is parked instead;
    the next ``LLM(...)`` of its configuration gets it. Never under another VLLM_* environment nor under
    fresh_engine, with the ledger's reason for each."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    shutil.copy(OWN_RUNNER_SUITE, pytester.path / "test_own_runner.py")
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess(
        "--harness-ledger-dir", str(directory), "--harness-reuse", "-p", "no:cacheprovider", "-v"
    )
    result.assert_outcomes(passed=6)
    merged = ledger.read(directory)
    vllm = [r for r in merged.records if r["kind"] == "vllm"]
    name = "test_own_runner.py::test_"
    assert [r["test"].removeprefix(name) for r in vllm] == [
        "embed[64]",
        "embed[128]",
        "under_another_environment",
        "fresh",
    ]
    assert {r["outcome"] for r in vllm} == {"started"}
    for earlier, later in zip(vllm, vllm[1:], strict=False):
        assert earlier["stop"] <= later["start"], "two engines were alive at once"
    assert [(r["test"].removeprefix(name), r["runner"]) for r in merged.reuses] == [
        ("embed_again[64]", vllm[0]["id"]),
        ("embed_again[128]", vllm[1]["id"]),
    ]
    assert [(r["test"].removeprefix(name), r["runner"], r["reason"]) for r in merged.refusals] == [
        (
            "under_another_environment",
            vllm[1]["id"],
            "the environment vLLM reads differs from its start's (VLLM_ALLOW_LONG_MAX_MODEL_LEN=None -> '1')",
        ),
        ("fresh", vllm[2]["id"], "the next test asked for a fresh engine (fresh_engine marker)"),
        ("fresh", vllm[3]["id"], "the test asked for a fresh engine (fresh_engine marker)"),
    ]
