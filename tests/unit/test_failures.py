"""Failure classes (harness.failures): every failure gets exactly one class; facts decide before text, a
suite's patterns before the harness's, an assertion last; a suite's bad patterns are one line."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import failures
from harness.errors import ConfigError, HarnessError, InfrastructureError, MemoryTimeout, RunnerBlocked
from harness.failures import CLASSES, Evidence, classify, exception_names, patterns

NAMES = st.frozensets(
    st.sampled_from(
        [
            "AssertionError",
            "RunnerBlocked",
            "MemoryTimeout",
            "OutOfMemoryError",
            "EngineDeadError",
            "ValueError",
        ]
        + ["ConnectionError", "InfrastructureError", "Exception", "BaseException", "RuntimeError"]
    )
    | st.text(max_size=20)
)
EVIDENCE = st.builds(
    Evidence,
    text=st.text(max_size=300),
    exceptions=NAMES,
    when=st.sampled_from(["setup", "call", "teardown", ""]),
    timed_out=st.booleans(),
    blocked=st.booleans(),
    engine_died=st.booleans(),
)
SUITE = st.lists(
    st.tuples(st.sampled_from(list(CLASSES)), st.sampled_from(["x", "flaky", r"\d+", "^$", "Read"])),
    max_size=4,
)


@given(EVIDENCE, SUITE)
def test_every_failure_has_exactly_one_known_class(evidence: Evidence, suite: list) -> None:
    compiled = tuple((name, re.compile(expression)) for name, expression in suite)
    assert classify(evidence, compiled) in CLASSES


@given(EVIDENCE)
def test_what_the_run_knows_decides_before_any_text(evidence: Evidence) -> None:
    """pytest-timeout's stop, a blocked start and a dead engine are facts: no message outweighs them."""
    anything = ((name, re.compile("")) for name in CLASSES)  # a suite pattern matching every text
    got = classify(evidence, tuple(anything))
    if evidence.timed_out:
        assert got == "timeout"
    elif evidence.blocked:
        assert got == "start-blocked"
    elif evidence.engine_died:
        assert got == "engine-died"


@given(st.text(max_size=200), st.sampled_from(list(CLASSES)))
def test_a_suites_pattern_comes_before_the_harnesss(text: str, name: str) -> None:
    """A suite that says "Read timed out" is an accuracy problem of its own gets its word, not ours."""
    evidence = Evidence(text=text + " Read timed out", exceptions=frozenset({"AssertionError"}))
    assert classify(evidence, patterns({name: ["Read timed out"]})) == name


def raised(error: BaseException, cause: BaseException | None = None) -> BaseException:
    try:
        try:
            if cause is not None:
                raise cause
        finally:
            raise error
    except BaseException as caught:
        return caught


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RunnerBlocked("vllm Qwen cannot start: needs 0.9; held by fixture llm"), "start-blocked"),
        (MemoryTimeout("Memory of devices [0] not free after 240 s"), "memory-not-settled"),
        (InfrastructureError("harness-out: cannot write it (No space left on device)"), "harness-fault"),
        (ConnectionError("[Errno 111] Connection refused"), "network"),
        (MemoryError(), "out-of-memory"),
        (AssertionError("embeddings differ: cosine 0.91"), "accuracy"),
        (ValueError("bad dtype"), "other"),
        # a cause deep in the chain still speaks: vLLM re-raises an engine's death as its own error
        (raised(RuntimeError("generate failed"), RunnerBlocked("held by fixture llm")), "start-blocked"),
    ],
)
def test_the_exception_decides_along_its_chain(error: BaseException, expected: str) -> None:
    assert classify(Evidence(text=str(error), exceptions=exception_names(error))) == expected


def test_an_assertion_outside_the_call_is_not_about_outputs() -> None:
    """A fixture's assert in setup says nothing of a test's outputs."""
    assert classify(Evidence(exceptions=frozenset({"AssertionError"}), when="setup")) == "other"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a timeout is pytest-timeout's fact, never a text that says so (a test may print it)
        ("E   Failed: Timeout (>30.0s) from pytest-timeout.", "other"),
        ("E   torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out-of-memory"),
        (
            "ValueError: Available memory on node 0 (6.05/7.59 GiB) on startup is less than desired CPU"
            " memory utilization (0.92, 6.98 GiB)",
            "out-of-memory",
        ),
        ("E   ValueError: Memory of devices devices=[0] not free after dur_s=240.14", "memory-not-settled"),
        ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.", "engine-died"),
        ("huggingface_hub.errors.LocalEntryNotFoundError: cannot find the requested files", "network"),
        ("INTERNALERROR> Traceback (most recent call last):", "harness-fault"),
        ("", "other"),
    ],
)
def test_text_alone_is_classified(text: str, expected: str) -> None:
    """What a JUnit file or a crashed worker leaves: the message, not the exception."""
    assert classify(Evidence(text=text)) == expected


def test_a_cyclic_chain_ends() -> None:
    first, second = ValueError("a"), KeyError("b")
    first.__context__, second.__context__ = second, first
    assert {"ValueError", "KeyError", "Exception"} <= exception_names(first)


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"flaky": ["x"]}, "flaky: unknown failure class (known: engine-died"),
        ({"network": "x"}, "network: expected a list of regular expressions"),
        ({"network": [""]}, "network: expected a list of regular expressions"),
        ({"network": [3]}, "network: expected a list of regular expressions"),
        ({"network": ["(unclosed"]}, "network: '(unclosed' is not a regular expression"),
    ],
)
def test_a_suites_bad_patterns_are_one_line(table: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)) as caught:
        patterns(table)
    assert "\n" not in str(caught.value) and isinstance(caught.value, HarnessError)


@given(st.lists(st.sampled_from(list(CLASSES)), max_size=40))
def test_counts_add_up_in_the_classes_order(classes: list[str]) -> None:
    got = failures.counts(classes)
    assert sum(got.values()) == len(classes)
    assert list(got) == [name for name in CLASSES if name in classes]
