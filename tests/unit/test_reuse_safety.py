"""Reuse never changes an outcome, on vLLM's real CPU build: the naive tests of vllm_reuse/safety_suite.py
(each expects what a fresh engine does after a test that left state behind) pass with reuse on, each
refusal with its reason in the ledger, a forked test after its parent's warm engine gave way, and a test
that reads the request numbering passing on a handed-on engine (reset), with no retry; and an engine a
thread its test left running can reach is not handed on (vllm_reuse/threads_suite.py).

Both tests read one nested pytest run of both suites (``safety_run``, built once per session: its six engine
starts of ~20 s and its vLLM import are the cost, so no test repeats them). A part of the safety suite, for
time; ``python benchmarks/reuse_safety.py`` runs all of it, off and on."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness import ledger
from tests.conftest import NESTED_ADDOPTS
from tests.models.conftest import minilm_path
from tests.models.generation.conftest import build

SUITE = Path(__file__).parent / "vllm_reuse" / "safety_suite.py"
THREADS = Path(__file__).parent / "vllm_reuse" / "threads_suite.py"
PART = "fresh_answers or random_state or paused or forked or requests_from_zero or test_threads.py"

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM's CPU build"),
    pytest.mark.engines,
]


@pytest.fixture(scope="session")
def safety_run(built_once: Callable[[str, Callable[[Path], None]], Path]) -> tuple[pytest.RunResult, Path]:
    """One ``--harness-reuse`` run of the safety suite's part, then the threads suite (its first test takes
    the engine the safety part left warm); its result and its ledger's folder. The model is built in this
    process before the run (torch and transformers imported here once)."""

    def run(folder: Path) -> None:
        model = build("llama", minilm_path(), folder / "llama")
        shutil.copy(SUITE, folder / "test_safety.py")
        shutil.copy(SUITE, folder / "safety_suite.py")  # the threads suite's runner; not collected
        shutil.copy(THREADS, folder / "test_threads.py")
        # as pytester's sessions: its own home and basetemp, no plugin none of them needs
        env = {**os.environ, "HARNESS_PLATFORM": "cpu", "SAFETY_MODEL": model, "HOME": str(folder)}
        env["PYTEST_ADDOPTS"] = NESTED_ADDOPTS
        command = [
            sys.executable,
            "-m",
            "pytest",
            "--basetemp",
            str(folder / "tmp"),
            "-p",
            "no:cacheprovider",
        ]
        command += ["--harness-ledger-dir", str(folder / "ledger"), "--harness-reuse", "-k", PART]
        ended = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
        (folder / "stdout").write_text(ended.stdout)
        (folder / "stderr").write_text(ended.stderr)
        (folder / "returncode").write_text(str(ended.returncode))

    folder = built_once("reuse-safety", run)
    lines = [(folder / name).read_text().splitlines() for name in ("stdout", "stderr")]
    result = pytest.RunResult(int((folder / "returncode").read_text()), *lines, duration=0.0)
    return result, folder / "ledger"


def _of(file: str, entries: list) -> list:
    return [entry for entry in entries if entry["test"].startswith(f"{file}::")]


@pytest.mark.engines(13)  # the run: its vLLM import, six starts of two processes each
@pytest.mark.timeout(2400)  # the run is its setup: ~6 min alone, far more on a busy host
def test_reuse_keeps_every_outcome_and_says_why_it_refused(safety_run):
    result, directory = safety_run
    result.assert_outcomes(passed=12)  # the safety part's 8 and the threads suite's 4
    merged = ledger.read(directory)
    name = "test_safety.py::test_"
    records = sorted(_of("test_safety.py", merged.records), key=lambda r: r["start"])  # the forked child's
    starts = [(r["test"].removeprefix(name), "." in r["id"].split("-")[0]) for r in records]  # file first
    assert starts == [
        ("fresh_answers", False),
        ("random_state_as_seeded", False),  # its engine's random state had moved on
        ("left_paused", False),  # so had this one's: the paused engine is woken and handed on
        ("forked", True),  # the child's own: the parent's warm engine gave way before the fork
        ("after_a_forked_test", False),
    ]
    assert [r["test"].removeprefix(name) for r in _of("test_safety.py", merged.reuses)] == [
        "after_a_paused_engine",
        "before_a_forked_test",
        "numbers_its_requests_from_zero",  # the request numbering is reset at the hand-off
    ]
    # each hand-off timed (its seconds are a figure: benchmarks/reuse_safety.py prints them)
    assert all(r["handoff_s"] >= 0 for r in merged.reuses)
    refusals = sorted(_of("test_safety.py", merged.refusals), key=lambda r: r["t"])
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


@pytest.mark.timeout(2400)  # waits for the run where another worker builds it
def test_an_engine_a_left_thread_can_reach_is_not_handed_on(safety_run):
    """The reuse residue (issue 58): an engine that a thread or timer its test left running can still reach
    is never handed to the next test (vllm_reuse/threads_suite.py). Before, it was: the thread's request
    took the next test's request number 0, its first try failed, and the safety net ran it twice more. The
    refusal names the threads; an engine whose test joined its thread is kept warm."""
    result, directory = safety_run
    merged = ledger.read(directory)
    threads = {t["nodeid"]: t["outcome"] for t in merged.tests if t["file"] == "test_threads.py"}
    assert list(threads.values()) == ["passed"] * 4, threads
    name = "test_threads.py::test_"
    # the first takes the engine the safety part left warm; the thread it leaves can reach that engine
    assert [r["test"].removeprefix(name) for r in _of("test_threads.py", merged.records)] == [
        "numbers_from_zero"
    ]
    assert [r["test"].removeprefix(name) for r in _of("test_threads.py", merged.reuses)] == [
        "leaves_a_thread",
        "joins_its_thread",
        "after_a_joined_thread",
    ]
    [refusal] = _of("test_threads.py", merged.refusals)
    assert refusal["test"].removeprefix(name) == "leaves_a_thread"
    assert refusal["reason"].startswith("a thread its test left running can still reach it (")
    assert "left-behind (thread)" in refusal["reason"] and "(timer)" in refusal["reason"]
    assert merged.reruns == []
