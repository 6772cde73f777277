"""A failure's class comes from facts about the failure (its exceptions' types and messages, pytest-timeout's
own timer, the process's exit), never from the source lines around it; every failed or errored test has
exactly one class in every output: report.json, junit.xml and summary.md (issue 58, item 1)."""

from __future__ import annotations

import json
import os
import re
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import ledger
from harness.failures import CLASSES
from tests.fakes import gpu

pytest_plugins = ["pytester"]
GIB = 2**30

# each kind of test: its body, and the class its failure must get (None: it passes)
KINDS: dict[str, tuple[str, str | None]] = {
    # a comment in the test's source that reads like a network error (old code: network)
    "comment": (
        "    # requests.exceptions.ConnectionError: Max retries exceeded (Connection refused)\n"
        "    assert [0.1] == [0.3]\n",
        "accuracy",
    ),
    # pytest-timeout's signal method firing inside an except ConnectionError block (old code: network)
    "timeout_in_except": (
        "    try:\n"
        "        raise ConnectionError('[Errno 111] Connection refused')\n"
        "    except ConnectionError:\n"
        "        time.sleep(30)\n",
        "timeout",
    ),
    # the test's process dies (old code: no class in any output)
    "dies": ("    os._exit(3)\n", "crashed"),
    # pytest-timeout's thread method ends the process (old code: no class in any output)
    "thread_timeout": ("    time.sleep(30)\n", "timeout"),
    "network": ("    raise ConnectionError('[Errno 111] Connection refused')\n", "network"),
    "setup_error": ("    pass\n", "other"),
    "passes": ("    pass\n", None),
}
MARKS = {
    "timeout_in_except": "@pytest.mark.timeout(1)\n",
    "thread_timeout": '@pytest.mark.timeout(1, "thread")\n',
}
HEADER = """import os
import time

import pytest


@pytest.fixture
def broken():
    raise ValueError("the fixture's own failure")

"""


def suite(kinds: list[str]) -> str:
    """A test module with one test per kind, in order (``test_<n>_<kind>``)."""
    tests = []
    for n, kind in enumerate(kinds):
        body, _ = KINDS[kind]
        uses = "broken" if kind == "setup_error" else ""
        tests.append(f"{MARKS.get(kind, '')}def test_{n}_{kind}({uses}):\n{body}")
    return HEADER + "\n\n".join(tests)


def harness_run(
    root: Path, kinds: list[str], *pytest_args: str
) -> tuple[int, dict, ElementTree.ElementTree, str]:
    """``harness run`` of ``suite(kinds)`` in ``root``: its exit, report.json, junit.xml and summary.md."""
    from harness.cli import main as harness

    (root / "pyproject.toml").write_text(
        '[tool.harness]\nretry = ["network"]\nretries = 1\n[tool.harness.suites.models]\npaths = ["tests"]\n'
    )
    (root / "tests").mkdir()
    (root / "tests" / "test_kinds.py").write_text(suite(kinds))
    here = Path.cwd()
    os.chdir(root)
    try:
        code = harness(["run", "--platform", "cpu", "--out", "out", "models", "--", *pytest_args])
    finally:
        os.chdir(here)
    out = root / "out"
    report = json.loads((out / "report.json").read_text())
    return code, report, ElementTree.parse(out / "junit.xml"), (out / "summary.md").read_text()


def classes_everywhere(report: dict, junit: ElementTree.ElementTree, summary: str) -> dict[str, list[list]]:
    """Each failed or errored test's classes in report.json, junit.xml and summary.md's table."""
    failed = {t["nodeid"]: t for t in report["tests"] if t["outcome"] in ("failed", "error")}
    found: dict[str, list[list]] = {nodeid: [[], [], []] for nodeid in failed}
    for nodeid, test in failed.items():
        found[nodeid][0] = [test.get("failure_class")]
    for case in junit.iter("testcase"):
        nodeid = f"tests/test_kinds.py::{case.get('name')}"
        if nodeid in found and (case.find("failure") is not None or case.find("error") is not None):
            found[nodeid][1] += [
                p.get("value") for p in case.iter("property") if p.get("name") == "failure_class"
            ]
    for name, tests in re.findall(r"^\| `([a-z-]+)` \| \d+ \| (.*) \|$", summary, re.MULTILINE):
        for nodeid in re.findall(r"`([^`]+)`", tests):
            if nodeid in found:
                found[nodeid][2].append(name)
    return found


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_each_family_gets_its_class_from_its_own_evidence_in_every_output(
    tmp_path: Path, fake_gpus, workers: tuple[str, ...]
) -> None:
    """Old code: the comment made an assertion ``network`` (and ``retry = ["network"]`` retried it), the
    timeout in an ``except ConnectionError`` block was ``network`` (retried, it passed), and the test whose
    process died and the one pytest-timeout's thread method ended had no class in report.json, junit.xml
    or summary.md: in one process (rebuilt from the ledger) or under xdist (its controller's crash)."""
    fake_gpus([], vendor="nvidia")
    kinds = ["comment", "timeout_in_except", "dies", "thread_timeout", "passes"]
    code, report, junit, summary = harness_run(tmp_path, kinds, *workers)
    assert code == 1
    found = classes_everywhere(report, junit, summary)
    expected = {f"tests/test_kinds.py::test_{n}_{kind}": KINDS[kind][1] for n, kind in enumerate(kinds)}
    assert found == {nodeid: [[name], [name], [name]] for nodeid, name in expected.items() if name}
    assert report.get("reruns", []) == []  # the assertion was not retried as a network error


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=4))
def test_every_failed_test_has_one_class_in_every_output(
    tmp_path_factory: pytest.TempPathFactory, fake_gpus, kinds: list[str]
) -> None:
    """The promise as a property: whatever mix of failures a suite has (crashes and thread-method timeouts
    included, which end their process), each failed or errored test has exactly one class, the same, in
    report.json, junit.xml and summary.md, and the one its evidence says."""
    fake_gpus([], vendor="nvidia")
    _, report, junit, summary = harness_run(tmp_path_factory.mktemp("kinds"), kinds)
    found = classes_everywhere(report, junit, summary)
    for nodeid, (in_report, in_junit, in_summary) in found.items():
        assert len(in_report) == 1 and in_report[0] in CLASSES, nodeid
        assert in_junit == in_report and in_summary == in_report, (nodeid, found[nodeid])
        kind = nodeid.split("::")[1].split("_", 2)[2]  # test_<n>_<kind>
        assert in_report[0] == KINDS[kind][1], nodeid
    failing = {
        f"tests/test_kinds.py::test_{n}_{kind}" for n, kind in enumerate(kinds) if KINDS[kind][1] is not None
    }
    assert set(found) == failing


GPU_FREE = """
from tests.unit.runner_suites.fake_runner import FakeRunner


def test_listed_but_starts_a_runner():
    with FakeRunner("small", gpu_memory_utilization=0.1):
        pass
"""


def test_the_gpu_free_jobs_needs_a_gpu_failure_has_a_class(
    pytester: pytest.Pytester, fake_gpus, monkeypatch
) -> None:
    """The CPU job fails a listed test that started a runner after its call passed (another plugin's
    report wrapper). Old code: the class was decided inside that wrapper, on the passing report, so the
    failure had none in the ledger or JUnit."""
    fake_gpus([gpu(0, total=80 * GIB, used=GIB)])
    pytester.makepyfile(test_free=textwrap.dedent(GPU_FREE))
    listing = {
        "mode": "only",
        "source": "history",
        "tests": ["test_free.py::test_listed_but_starts_a_runner"],
    }
    (pytester.path / "free.json").write_text(json.dumps(listing))
    monkeypatch.setenv("HARNESS_GPU_FREE_TESTS", str(pytester.path / "free.json"))
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess(
        "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider", "--junitxml", "junit.xml"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*it needs a GPU*"])
    (test,) = ledger.read(directory).tests
    assert test["failure_class"] == "other"
    properties = [
        p.get("value")
        for p in ElementTree.parse(pytester.path / "junit.xml").iter("property")
        if p.get("name") == "failure_class"
    ]
    assert properties == ["other"]


LEDGER_TESTS = st.lists(
    st.tuples(
        st.sampled_from(["passed", "failed", "error", "skipped"]), st.none() | st.sampled_from(list(CLASSES))
    ),
    max_size=4,
)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(LEDGER_TESTS, st.sampled_from(["none", "crashed", "thread-timeout"]))
def test_every_failed_ledger_test_has_one_class_in_every_output(
    tmp_path_factory: pytest.TempPathFactory, tests: list[tuple[str, str | None]], died: str
) -> None:
    """The same promise over ledgers as they come (no plugin ran: a class present or missing, a test its
    process died in, with or without pytest-timeout's thread-method finding): report.json, junit.xml and
    summary.md give each failed or errored test exactly one class, the same; a death is ``crashed``, or
    ``timeout`` where the thread method's timer said it fired."""
    from tests.unit.report_runs import Run

    root = tmp_path_factory.mktemp("ledger")
    run = Run(root).phase("default", 0, 100)
    worker = run.worker("default")
    for n, (outcome, name) in enumerate(tests):
        worker.write(
            "test", 1.0 + n, nodeid=f"tests/test_kinds.py::test_{n}", outcome=outcome,
            setup_s=0.0, call_s=1.0, teardown_s=0.0, **({"failure_class": name} if name else {}),
        )  # fmt: skip
    dead = f"tests/test_kinds.py::test_{len(tests)}"
    if died != "none":
        worker.write("test-start", 50.0, nodeid=dead)
    if died == "thread-timeout":
        worker.finding("timeout", "Timeout (>1s) from pytest-timeout's thread method", 51.0, test=dead)
    report = run.finalize()
    found = classes_everywhere(
        report, ElementTree.parse(root / "junit.xml"), (root / "summary.md").read_text()
    )
    for nodeid, (in_report, in_junit, in_summary) in found.items():
        assert len(in_report) == 1 and in_report[0] in CLASSES, nodeid
        assert in_junit == in_report and in_summary == in_report, (nodeid, found[nodeid])
    given = {
        f"tests/test_kinds.py::test_{n}": name
        for n, (outcome, name) in enumerate(tests)
        if outcome in ("failed", "error")
    }
    assert {n: c[0][0] for n, c in found.items() if n != dead} == {
        n: name or "other" for n, name in given.items()
    }
    if died != "none":
        assert found[dead][0] == ["timeout" if died == "thread-timeout" else "crashed"]


UNPRINTABLE = """
class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no str")


def test_unprintable():
    raise Unprintable()


def test_refused_from_an_unprintable():
    try:
        raise Unprintable()
    except Unprintable as error:
        raise ConnectionError("[Errno 111] Connection refused") from error
"""


def test_an_exception_that_cannot_be_printed_still_gets_its_class(pytester: pytest.Pytester) -> None:
    """Hostile: an exception whose ``__str__`` raises (pytest prints ``<exception str() failed>``). Its
    class comes from its types; the session does not end in an INTERNALERROR."""
    pytester.makepyprojecttoml("[tool.harness]\n")
    pytester.makepyfile(test_unprintable=UNPRINTABLE)
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess("--harness-ledger-dir", str(directory), "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    classes = {t["nodeid"].split("::")[1]: t["failure_class"] for t in ledger.read(directory).tests}
    assert classes == {"test_unprintable": "other", "test_refused_from_an_unprintable": "network"}


def test_a_late_exit_is_no_timeout_without_pytest_timeouts_word(tmp_path: Path) -> None:
    """How long a test ran is no evidence: a worker under the thread method (2 s) whose test exits with
    status 1 after 1.95 s, with no ``timeout`` finding from pytest-timeout's timer, crashed; the one whose
    timer wrote its finding first timed out."""
    from tests.unit.report_runs import Run

    run = Run(tmp_path).phase("default", 0, 100)
    for worker_name, fired in (("gw0", False), ("gw1", True)):
        worker = run.worker("default", worker_name)
        worker.write(
            "worker", 0.5, worker=worker_name, devices=["cpu"], pid=7, timeout=2.0, timeout_method="thread"
        )
        worker.write("test-start", 1.0, nodeid=f"t.py::test_{worker_name}")
        if fired:
            worker.finding(
                "timeout", "Timeout (>2.0s) from pytest-timeout's thread method", 3.0, test="t.py::test_gw1"
            )
        controller = run.worker("default", "controller")
        controller.write(
            "crash", 2.95, test=f"t.py::test_{worker_name}", worker=worker_name, how="exited with status 1"
        )
    classes = {t["nodeid"]: t["failure_class"] for t in ledger.read(tmp_path / "ledger").tests}
    assert classes == {"t.py::test_gw0": "crashed", "t.py::test_gw1": "timeout"}
