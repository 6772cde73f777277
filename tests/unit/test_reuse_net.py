"""The reuse safety net over the stub vLLM (tests/unit/test_patches.py): a failure stays a failure, and
every retry is in the open (terminal, JUnit, ledger, summary), counted against what reuse saved.

A test that fails without reuse must fail with reuse; a test that fails only because of the engine it was
handed must pass. The net tells them apart (harness.pytest_plugin.safety_net): it runs a failed test again on
the engine it failed on, then on fresh engines; a history that saw the test fail spares the retry.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from harness.pytest_plugin.terminal import _avoided
from harness.report import junit
from harness.report.build import starts
from harness.report.summary import _reused
from tests.unit.test_patches import OWN_RUNNER, REUSABLE

pytest_plugins = ["pytester", "tests.unit.vllm_stub"]

HEAD = OWN_RUNNER.split("    @pytest.mark.parametrize")[0]

# fails on its first call in the process, whatever engine it gets (plain pytest: fails)
FIRST_CALL = (
    HEAD
    + """
    CALLS = []


    def test_warms_an_engine():
        with Runner("org/model"):
            pass


    def test_fails_on_its_first_call():
        CALLS.append(1)
        with Runner("org/model"):
            pass
        assert len(CALLS) > 1, "the first call in this process"
    """
)

# fails on any engine, after a test that leaves a warm one (plain pytest: fails)
ANY_ENGINE = (
    HEAD
    + """
    def test_warms_an_engine():
        with Runner("org/model"):
            pass


    def test_fails_on_any_engine():
        with Runner("org/model"):
            raise AssertionError("fails on every engine")
    """
)


def test_a_test_that_fails_on_its_first_call_fails_with_reuse_too(run_with_stub, monkeypatch):
    """It was handed an engine and failed; the net used to pass it on a fresh retry, hiding a failure
    plain pytest reports. Passing on the very engine it failed on says the engine is not why."""
    result, plain = run_with_stub(FIRST_CALL, engine=REUSABLE)
    result.assert_outcomes(passed=1, failed=1)
    monkeypatch.setenv("HARNESS_REUSE", "1")
    result, merged = run_with_stub(FIRST_CALL, "-v")
    result.assert_outcomes(passed=1, failed=1)
    assert [(t["nodeid"], t["outcome"]) for t in merged.tests] == [
        (t["nodeid"], t["outcome"]) for t in plain.tests
    ]
    assert len(merged.records) == 1  # no fresh start for its retry: the replay took the engine it failed on
    [rerun] = merged.reruns
    assert (rerun["attempt"], rerun["outcome"], rerun["result"], rerun["counts"]) == (
        2,
        "passed",
        "failed",
        1,
    )
    assert rerun["first_message"].startswith("AssertionError: the first call in this process")
    assert "same engine" in rerun["verdict"] and rerun["policy"] == "reuse"
    [own] = [f for f in merged.findings if f["type"] == "own-failure"]
    assert own["test"].endswith("test_fails_on_its_first_call")
    result.stdout.fnmatch_lines(
        ["*test_fails_on_its_first_call RERUN*", "*test_fails_on_its_first_call FAILED*"]
    )


def test_a_failure_on_any_engine_stays_a_failure_and_each_retry_shows(run_with_stub, monkeypatch, pytester):
    monkeypatch.setenv("HARNESS_REUSE", "1")
    result, merged = run_with_stub(ANY_ENGINE, "-v", "--junitxml=junit.xml", engine=REUSABLE)
    result.assert_outcomes(passed=1, failed=1)
    assert result.parseoutcomes()["rerun"] == 2  # its replay and its fresh try: RERUN lines
    assert [(r["attempt"], r["outcome"], r["starts"], r["reused"]) for r in merged.reruns] == [
        (2, "failed", 0, 1),  # the replay: handed the engine it failed on
        (3, "failed", 1, 0),  # on a fresh engine
    ]
    # pytest's JUnit: one test case, its first failure; the rerun records go into the merged junit.xml
    case = _case(ET.fromstring((pytester.path / "junit.xml").read_text()), "test_fails_on_any_engine")
    assert len(case.findall("failure")) == 1
    [pytests] = pytester.path.glob("junit.xml")
    pytests.rename(pytester.path / "pooling.xml")
    for rerun in merged.reruns:
        rerun["phase"] = "pooling"  # what harness run's phases are named; this session had none
    merged_xml = ET.fromstring(junit.merge(pytester.path, [], [], str, merged.reruns).encode())
    tags = [c.tag for c in _case(merged_xml, "test_fails_on_any_engine") if c.tag.startswith("rerun")]
    assert tags == ["rerunFailure", "rerunFailure"]
    # the summary, net of the retries: 2 hand-ons, less the replay's and the fresh try's start: plain
    # pytest's 2 starts, as with reuse
    result.stdout.fnmatch_lines(
        ["*2 runner starts (vllm 2)*, 0 avoided by reuse (*net of 2 retries)*", "*retried 2x (1 tests)*"]
    )


# one test: its first runner's engine is handed to its second, where it fails (in any order of tests)
HANDED_WITHIN = (
    HEAD
    + """
    def test_fails_on_any_engine():
        with Runner("org/model"):
            pass
        with Runner("org/model"):
            raise AssertionError("fails on every engine")
    """
)


def test_a_failure_the_history_saw_costs_no_start_and_says_so(run_with_stub, monkeypatch, pytester):
    """A failure of its own cost a fresh start in every run; once a run saw it fail it is not retried."""
    monkeypatch.setenv("HARNESS_REUSE", "1")
    history = pytester.path / "configurations.json"
    history.write_text(json.dumps({"test_suite.py::test_fails_on_any_engine": "failed 0123456789ab"}))
    monkeypatch.setenv("HARNESS_CONFIGURATIONS", str(history))
    result, merged = run_with_stub(HANDED_WITHIN, engine=REUSABLE)
    result.assert_outcomes(failed=1)
    assert len(merged.reuses) == 1  # handed its own first engine, and failed on it
    assert len(merged.records) == 1 and merged.reruns == []
    [own] = [f for f in merged.findings if f["type"] == "own-failure"]
    assert "failed in the run given as history too" in own["message"] and "no extra start" in own["message"]


def _case(root: ET.Element, name: str) -> ET.Element:
    return next(case for case in root.iter("testcase") if case.get("name") == name)


def _rerun(attempt: int, outcome: str, result: str, counts: int, **extra) -> dict:
    return {
        "t": 1.0,
        "test": "tests/test_a.py::test_x",
        "attempt": attempt,
        "outcome": outcome,
        "when": "call" if outcome != "passed" else None,
        "message": None if outcome == "passed" else f"AssertionError: try {attempt}",
        "longrepr": None if outcome == "passed" else f"trace of try {attempt}",
        "first_outcome": "failed",
        "first_message": "AssertionError: try 1",
        "first_longrepr": "trace of try 1",
        "why": "the test failed on a handed-on engine",
        "policy": "reuse",
        "starts": 1,
        "started_s": 30.0,
        "reused": 0,
        "reused_s": 0.0,
        "result": result,
        "counts": counts,
        "verdict": "because",
        "file": "tests/test_a.py",
        "worker": "gw0",
        "phase": "pooling",
        **extra,
    }


PYTEST_JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="1">
<testcase classname="tests.test_a" name="test_x" time="1.0">{result}</testcase>
</testsuite></testsuites>"""


@pytest.mark.parametrize(
    ("result", "reruns", "tags"),
    [
        # rescued: the failed tries are flaky failures beside the passing result
        ("", [_rerun(2, "failed", "passed", 3), _rerun(3, "passed", "passed", 3)], ["flakyFailure"] * 2),
        # failed in the end: the first try is pytest's <failure>, each later failed try a rerunFailure
        (
            '<failure message="AssertionError: try 1">trace of try 1</failure>',
            [_rerun(2, "failed", "failed", 1), _rerun(3, "failed", "failed", 1)],
            ["rerunFailure"] * 2,
        ),
        # failed in the end after a passing replay: no rerun failure, the rerun's property says why
        ('<failure message="AssertionError: try 1">x</failure>', [_rerun(2, "passed", "failed", 1)], []),
    ],
)
def test_junit_carries_each_rerun_as_surefire_does(tmp_path, result, reruns, tags):
    (tmp_path / "pooling.xml").write_text(PYTEST_JUNIT.format(result=result))
    root = ET.fromstring(junit.merge(tmp_path, [], [], str, reruns).encode())
    case = _case(root, "test_x")
    found = [child for child in case if child.tag.startswith(("flaky", "rerun"))]
    assert [child.tag for child in found] == tags
    if tags and tags[0] == "flakyFailure":
        assert [c.get("message") for c in found] == ["AssertionError: try 1", "AssertionError: try 2"]
        assert found[0].find("stackTrace").text == "trace of try 1"
    if tags and tags[0] == "rerunFailure":
        assert [c.get("message") for c in found] == ["AssertionError: try 2", "AssertionError: try 3"]
    properties = [p.get("value") for p in case.iter("property") if p.get("name") == "harness.rerun"]
    assert len(properties) == len(reruns) and all("(reuse)" in p for p in properties)


def test_starts_avoided_and_seconds_saved_are_net_of_the_retries():
    records = [{"kind": "vllm", "phase": "p", "file": "f", "outcome": "started", "startup_s": 30.0}]
    reuses = [{"kind": "vllm", "phase": "p", "file": "f", "saved_s": 30.0}] * 3
    reruns = [
        _rerun(
            2, "failed", "failed", 1, phase="p", file="f", reused=1, reused_s=30.0, starts=0, started_s=0.0
        ),
        _rerun(3, "failed", "failed", 1, phase="p", file="f"),
    ]
    tally = starts(records, reuses, reruns)
    assert (tally["total"]["reused"], tally["total"]["saved_s"]) == (1, 30.0)
    assert (tally["total"]["retries"], tally["total"]["retry_starts"]) == (2, 1)
    assert tally["by_phase"]["p"]["reused"] == 1 and tally["by_file"]["f"]["saved_s"] == 30.0
    assert tally["by_kind"]["vllm"]["reused"] == 3  # a retry is a test's, not a kind's
    assert "retries" not in starts(records, reuses)["total"]


def test_retries_that_run_without_reuse_too_are_not_taken_from_what_reuse_avoided():
    """A pytest-rerunfailures rerun or a retry by failure class runs with reuse off as well: its starts are
    not reuse's cost. Old code took every retry's starts off: plain pytest whose flaky-marked vLLM test
    reran said "-2 avoided by reuse (-44.0 s saved, net of 1 retries)" (vLLM 0.32's own
    test_xlm_roberta_models, benchmarks/vllm_upstream.py --flaky)."""
    records = [{"kind": "vllm", "phase": "p", "file": "f", "outcome": "started", "startup_s": 22.0}] * 2
    for policy in ("pytest-rerunfailures", "failure class"):
        reruns = [
            _rerun(2, "passed", "passed", 1, phase="p", file="f", policy=policy, starts=2, started_s=44.0)
        ]
        tally = starts(records, [], reruns)["total"]
        assert (tally["reused"], tally["saved_s"], tally["retries"]) == (0, 0.0, 1)
        assert _avoided(records, [], reruns) == ""  # the terminal's line: reuse did nothing, says nothing
    reuses = [{"kind": "vllm", "phase": "p", "file": "f", "saved_s": 22.0}]
    assert _avoided(records, reuses, reruns) == ", 1 avoided by reuse (22.0 s saved)"  # as report.json


def test_the_summary_names_every_retry_apart_from_what_reuse_avoided():
    """summary.md's line. Old code: "2 more avoided by reuse (30.0 s saved, net of 1 retries that started
    2)" for a retry by failure class that reuse never paid for."""
    records = [{"kind": "vllm", "phase": "p", "file": "f", "outcome": "started", "startup_s": 15.0}] * 2
    reused = [{"phase": "p", "file": "f", "saved_s": 15.0}] * 2
    reruns = [_rerun(2, "passed", "passed", 1, phase="p", file="f", policy="failure class", starts=2)]
    line = _reused(starts(records, reused, reruns)["total"])
    assert line == " 2 more avoided by reuse (30.0 s saved). 1 tries ran again, starting 2."
