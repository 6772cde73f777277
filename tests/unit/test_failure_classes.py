"""Failure classes produced for real (pytester runs of the plugin on fake GPUs, the fake runner going
through the harness's own start path): each test causes its failure, and the ledger and JUnit say which."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ElementTree

import pytest

from harness import ledger
from tests.fakes import gpu

pytest_plugins = ["pytester"]
GIB = 2**30

CAUSES = """
import os
import pytest
from tests.unit.runner_suites.fake_runner import FakeRunner, _take


def test_memory_never_comes_down():
    _take(70 * 2**30)  # another process's memory, as far as the harness knows
    try:
        with FakeRunner("late", gpu_memory_utilization=0.5):
            pass
    finally:
        _take(-70 * 2**30)


@pytest.fixture(scope="module")
def kept_engine():
    with FakeRunner("kept", gpu_memory_utilization=0.6) as runner:
        yield runner


def test_holds(kept_engine):
    pass


def test_blocked_by_the_module_engine(kept_engine):
    with FakeRunner("other", gpu_memory_utilization=0.6):
        pass


@pytest.mark.timeout(0.5)
def test_hangs():
    import time

    time.sleep(30)


def test_offline_hub_load():
    from huggingface_hub import hf_hub_download

    hf_hub_download("harness-tests/no-such-model", "config.json")


def test_wrong_output():
    embeddings = [0.1, 0.2]
    assert embeddings == [0.1, 0.3], "embeddings differ"


def test_out_of_memory_in_the_test():
    raise MemoryError("the test asked for too much")


def test_something_else():
    raise ValueError("bad dtype")


def test_own_pattern():
    raise RuntimeError("429 Too Many Requests from the model mirror")
"""

EXPECTED = {
    "test_blocked_by_the_module_engine": "start-blocked",
    "test_memory_never_comes_down": "memory-not-settled",
    "test_hangs": "timeout",
    "test_offline_hub_load": "network",
    "test_wrong_output": "accuracy",
    "test_out_of_memory_in_the_test": "out-of-memory",
    "test_something_else": "other",
    "test_own_pattern": "network",
}


@pytest.fixture
def caused(pytester: pytest.Pytester, fake_gpus, monkeypatch):
    fake_gpus([gpu(0, total=80 * GIB, used=GIB)])
    pytester.makepyfile(test_causes=textwrap.dedent(CAUSES))
    pytester.makepyprojecttoml('[tool.harness]\nfailure_patterns = { network = ["429 Too Many Requests"] }\n')
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(pytester.path / "hf"))
    monkeypatch.setenv("HARNESS_MEMORY_WAIT_TIMEOUT_S", "0.3")
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess(
        "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider", "--junitxml", "junit.xml"
    )
    return result, ledger.read(directory), pytester.path / "junit.xml"


def test_each_cause_gets_its_class(caused) -> None:
    result, merged, _ = caused
    result.assert_outcomes(passed=1, failed=len(EXPECTED))
    got = {test["nodeid"].split("::")[-1]: test.get("failure_class") for test in merged.tests}
    assert got == {"test_holds": None, **EXPECTED}


def test_junit_carries_the_class_as_a_property(caused) -> None:
    _, _, junit = caused
    classes = {
        case.get("name"): prop.get("value")
        for case in ElementTree.parse(junit).iter("testcase")
        for prop in case.iter("property")
        if prop.get("name") == "failure_class"
    }
    assert classes == EXPECTED


def test_report_and_summary_count_each_class_and_set_quarantine_apart(tmp_path) -> None:
    """report.json keeps each failed test's class; summary.md counts them per class, in the classes'
    order, with the tests named, and a quarantined failure (pytest's xfail: skipped) apart."""
    from harness.report.summary import render
    from tests.unit.report_runs import Run

    run = Run(tmp_path).phase("default", 0, 100)
    worker = run.worker("default")
    tests = [
        ("t.py::test_a", "failed", "accuracy"),
        ("t.py::test_b", "failed", "network"),
        ("t.py::test_c", "error", "network"),
        ("t.py::test_d", "skipped", "engine-died"),  # quarantined
        ("t.py::test_e", "passed", None),
    ]
    for n, (nodeid, outcome, name) in enumerate(tests):
        fields = {"failure_class": name} if name else {}
        worker.write(
            "test", 1.0 + n, nodeid=nodeid, outcome=outcome, setup_s=0.0, call_s=1.0, teardown_s=0.0, **fields
        )
    report = run.finalize()
    assert [t.get("failure_class") for t in report["tests"]] == [name for _, _, name in tests]
    text = render(report)
    assert "| `network` | 2 | `t.py::test_b`, `t.py::test_c` |" in text
    assert text.index("| `network`") < text.index("| `accuracy`")  # the classes' own order
    assert "1 quarantined tests failed without failing the run: `t.py::test_d`" in text


RETRIED = """
import pathlib


def _tries(name):
    marker = pathlib.Path(name)
    count = int(marker.read_text()) + 1 if marker.exists() else 1
    marker.write_text(str(count))
    return count


def test_hub_hiccup():
    if _tries("hub") == 1:
        raise ConnectionError("[Errno 111] Connection refused")


def test_hub_down():
    _tries("down")
    raise ConnectionError("[Errno 111] Connection refused")


def test_wrong_output():
    _tries("wrong")
    assert [0.1] == [0.3]
"""


def test_retries_only_the_named_classes_each_try_in_the_open(pytester: pytest.Pytester) -> None:
    """``retry = ["network"]``, ``retries = 2``: the hub hiccup passes on its second try (flaky, shown),
    the hub outage fails all three tries and its first failure counts, the wrong output runs once."""
    pytester.makepyfile(test_retried=RETRIED)
    pytester.makepyprojecttoml('[tool.harness]\nretry = ["network"]\nretries = 2\n')
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess("--harness-ledger-dir", str(directory), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*2 failed, 1 passed, 3 rerun in *"])
    assert [(pytester.path / name).read_text() for name in ("hub", "down", "wrong")] == ["2", "3", "1"]
    merged = ledger.read(directory)
    reruns = [(r["test"].split("::")[1], r["attempt"], r["policy"], r["result"]) for r in merged.reruns]
    assert reruns == [
        ("test_hub_hiccup", 2, "failure class", "passed"),
        ("test_hub_down", 2, "failure class", "failed"),
        ("test_hub_down", 3, "failure class", "failed"),
    ]
    assert all(r["first_failure_class"] == "network" for r in merged.reruns)


def test_no_retry_unless_asked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_retried=RETRIED)
    pytester.makepyprojecttoml("[tool.harness]\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=3)
    assert (pytester.path / "hub").read_text() == "1"


def test_an_unknown_retry_class_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_retried=RETRIED)
    pytester.makepyprojecttoml('[tool.harness]\nretry = ["flaky"]\n')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*retry: 'flaky' is not a failure class (known: engine-died, *"])


def test_a_harness_run_reports_retries_and_pass_at_1(
    pytester: pytest.Pytester, fake_gpus, monkeypatch
) -> None:
    """Through ``harness run``: junit.xml carries surefire's rerun records, report.json the reruns and
    classes, summary.md pass@1 beside the final outcome."""
    from harness.cli import main as harness

    fake_gpus([], vendor="nvidia")
    pytester.makepyprojecttoml(
        '[tool.harness]\nretry = ["network"]\nretries = 2\n[tool.harness.suites.models]\npaths = ["tests"]\n'
    )
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_retried.py").write_text(RETRIED)
    monkeypatch.chdir(pytester.path)
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 1
    junit = ElementTree.parse(pytester.path / "out/junit.xml")
    cases = {case.get("name"): case for case in junit.iter("testcase")}
    assert cases["test_hub_hiccup"].find("flakyFailure") is not None
    assert len(cases["test_hub_down"].findall("rerunFailure")) == 2
    assert not list(cases["test_wrong_output"].iter("rerunFailure"))
    report = json.loads((pytester.path / "out/report.json").read_text())
    assert {t["nodeid"].split("::")[1]: t.get("failure_class") for t in report["tests"]} == {
        "test_hub_hiccup": None,
        "test_hub_down": "network",
        "test_wrong_output": "accuracy",
    }
    summary = (pytester.path / "out/summary.md").read_text()
    assert "pass@1: 0 of 3 tests passed on their first try; finally 1 passed (1 only on a retry)" in summary
