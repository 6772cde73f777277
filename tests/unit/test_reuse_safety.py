"""Reuse never changes an outcome, on vLLM's real CPU build: the naive tests of vllm_reuse/safety_suite.py
(each expects what a fresh engine does after a test that left state behind) pass with reuse on, each
refusal with its reason in the ledger, a forked test after its parent's warm engine gave way, and a test
that reads the request numbering passing on a handed-on engine (reset), with no retry. A part of the suite,
for time (five starts of ~20 s); ``python benchmarks/reuse_safety.py`` runs all of it, off and on."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from harness import ledger
from tests.models.conftest import minilm_path
from tests.models.generation.conftest import build

pytest_plugins = ["pytester"]
SUITE = Path(__file__).parent / "vllm_reuse" / "safety_suite.py"
PART = "fresh_answers or random_state or paused or forked or requests_from_zero"

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM's CPU build"),
    pytest.mark.engines,
]


@pytest.fixture(scope="module")
def safety_model(tmp_path_factory) -> str:
    """Built before any test's pytester: pytester puts sys.modules back after its test, and the torch and
    transformers modules a build imports there would be dropped under their loaded C extensions (a later
    test's import in this worker then failed: "Only a single TORCH_LIBRARY ...", "bad call flags")."""
    return build("llama", minilm_path(), tmp_path_factory.mktemp("llama"))


def test_reuse_keeps_every_outcome_and_says_why_it_refused(pytester, monkeypatch, safety_model):
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    monkeypatch.setenv("SAFETY_MODEL", safety_model)
    shutil.copy(SUITE, pytester.path / "test_safety.py")
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess(
        "--harness-ledger-dir", str(directory), "--harness-reuse", "-p", "no:cacheprovider", "-k", PART
    )
    result.assert_outcomes(passed=8)
    merged = ledger.read(directory)
    name = "test_safety.py::test_"
    records = sorted(merged.records, key=lambda r: r["start"])  # the forked child's file is read first
    starts = [(r["test"].removeprefix(name), "." in r["id"].split("-")[0]) for r in records]
    assert starts == [
        ("fresh_answers", False),
        ("random_state_as_seeded", False),  # its engine's random state had moved on
        ("left_paused", False),  # so had this one's: the paused engine is woken and handed on
        ("forked", True),  # the child's own: the parent's warm engine gave way before the fork
        ("after_a_forked_test", False),
    ]
    assert [r["test"].removeprefix(name) for r in merged.reuses] == [
        "after_a_paused_engine",
        "before_a_forked_test",
        "numbers_its_requests_from_zero",  # the request numbering is reset at the hand-off
    ]
    # each hand-off timed (its seconds are a figure: benchmarks/reuse_safety.py prints them)
    assert all(r["handoff_s"] >= 0 for r in merged.reuses)
    refusals = sorted(merged.refusals, key=lambda r: r["t"])
    reasons = [(r["test"].removeprefix(name), r["reason"].split(":")[0]) for r in refusals]
    unseeded = "a request sampled without a seed of its own"
    assert reasons == [
        ("fresh_answers", unseeded),
        ("random_state_as_seeded", unseeded),
        ("forked", "a test forks a process"),
        ("forked", "it is closed in a forked test's process, which ends without closing what it keeps"),
    ]
    assert merged.reruns == [] and not [f for f in merged.findings if f["type"] == "reuse-sensitive"]
    result.stdout.fnmatch_lines(["*reuse refused*a request sampled without a seed of its own*"])


THREADS = Path(__file__).parent / "vllm_reuse" / "threads_suite.py"


def test_an_engine_a_left_thread_can_reach_is_not_handed_on(pytester, monkeypatch, safety_model):
    """The reuse residue (issue 58): an engine that a thread or timer its test left running can still reach
    is never handed to the next test (vllm_reuse/threads_suite.py). Before, it was: the thread's request
    took the next test's request number 0, its first try failed, and the safety net ran it twice more. The
    refusal names the threads; an engine whose test joined its thread is kept warm."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    monkeypatch.setenv("SAFETY_MODEL", safety_model)
    shutil.copy(SUITE, pytester.path / "safety_suite.py")  # its runner; not collected (not test_*)
    shutil.copy(THREADS, pytester.path / "test_threads.py")
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess(
        "--harness-ledger-dir", str(directory), "--harness-reuse", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=4)
    merged = ledger.read(directory)
    name = "test_threads.py::test_"
    assert [r["test"].removeprefix(name) for r in merged.records] == ["leaves_a_thread", "numbers_from_zero"]
    assert [r["test"].removeprefix(name) for r in merged.reuses] == [
        "joins_its_thread",
        "after_a_joined_thread",
    ]
    [refusal] = merged.refusals
    assert refusal["test"].removeprefix(name) == "leaves_a_thread"
    assert refusal["reason"].startswith("a thread its test left running can still reach it (")
    assert "left-behind (thread)" in refusal["reason"] and "(timer)" in refusal["reason"]
    assert merged.reruns == []
