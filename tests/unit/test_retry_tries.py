"""Each retry is a full try (issue 58, item 2): its own timeout (pytest-timeout's timer, re-armed), its own
fixture set-up (a failed module-scoped fixture is built again), its own outcome (a retry that skips is not
a pass); and pytest-rerunfailures' ``flaky(reruns=N)`` keeps its reruns beside the harness's retries and
reuse. Each suite runs for real (pytester, a pytest subprocess with the harness's plugin)."""

from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import ledger

pytest_plugins = ["pytester"]

TRIES = """
import json
import pathlib
import signal
import threading
import time

import pytest

PLAN = {plan!r}


def _armed():
    # pytest-timeout's timer for this try: the signal method's itimer, or the thread method's timer thread
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    timers = [t for t in threading.enumerate() if t.name.startswith("pytest_timeout") and t.is_alive()]
    return left > 0 or bool(timers)


@pytest.mark.timeout({timeout}, method={method!r})
def test_planned():
    log = pathlib.Path("tries.jsonl")
    number = len(log.read_text().splitlines()) if log.exists() else 0
    with log.open("a") as out:
        out.write(json.dumps({{"try": number, "armed": _armed()}}) + "\\n")
    what = PLAN[number]
    if what == "hang":
        time.sleep(30)
    elif what == "network":
        raise ConnectionError("[Errno 111] Connection refused")
"""


def run(pytester: pytest.Pytester, toml: str, suite: str, *args: str) -> pytest.RunResult:
    pytester.makepyprojecttoml(toml)
    pytester.makepyfile(test_suite=suite)
    directory = pytester.path / "ledger"
    return pytester.runpytest_subprocess(
        "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider", *args
    )


def outcomes(result: pytest.RunResult) -> dict[str, int]:
    """The run's last line as counts (pytest's ``assert_outcomes`` knows no ``rerun``)."""
    return result.parseoutcomes()


def tries(pytester: pytest.Pytester) -> list[dict]:
    return [json.loads(line) for line in (pytester.path / "tries.jsonl").read_text().splitlines()]


def test_a_retry_of_a_timeout_runs_under_its_own_timeout(pytester: pytest.Pytester) -> None:
    """``retry = ["timeout"]``. Old code: pytest-timeout's one-shot timer had fired in the first try, so the
    retry ran with none, slept out its 3 s and passed: a test that overruns every time reported flaky."""
    suite = TRIES.format(plan=["hang", "hang"], timeout=0.5, method="signal").replace("30", "3")
    result = run(pytester, '[tool.harness]\nretry = ["timeout"]\nretries = 1\n', suite)
    result.assert_outcomes(failed=1)
    assert tries(pytester) == [{"try": 0, "armed": True}, {"try": 1, "armed": True}]
    (rerun,) = ledger.read(pytester.path / "ledger").reruns
    assert (rerun["outcome"], rerun["failure_class"], rerun["result"]) == ("failed", "timeout", "failed")


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(["signal", "thread"]).flatmap(
        lambda method: st.tuples(
            st.just(method),
            # the thread method ends the process at a timeout: its tries fail by the network alone
            st.lists(st.sampled_from(["network"] if method == "thread" else ["network", "hang"]), max_size=3),
        )
    ),
    st.sampled_from(["harness", "rerunfailures"]),
)
def test_a_retry_never_runs_without_its_timeout(
    pytester: pytest.Pytester, planned: tuple[str, list[str]], driver: str
) -> None:
    """The promise as a property: whatever fails how often (network errors, hangs), under either of
    pytest-timeout's methods and whichever mechanism retries (the harness's ``retry``, or
    pytest-rerunfailures' marker beside it), every try runs with pytest-timeout's timer armed, and every
    hanging try is stopped by it."""
    method, failing = planned
    plan = [*failing, "pass"]
    suite = TRIES.format(plan=plan, timeout=1, method=method)
    toml = f'[tool.harness]\nretry = ["network", "timeout"]\nretries = {max(1, len(failing))}\n'
    if driver == "rerunfailures":
        marker = f"@pytest.mark.flaky(reruns={len(failing)})\n@pytest.mark.timeout"
        suite = suite.replace("@pytest.mark.timeout", marker)
    for old in pytester.path.iterdir():  # hypothesis runs its examples in one pytester directory
        if old.name in ("tries.jsonl", "ledger"):
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    result = run(pytester, toml, suite)
    result.assert_outcomes(passed=1)
    assert tries(pytester) == [{"try": n, "armed": True} for n in range(len(plan))]


MODULE_FIXTURE = """
import pathlib

import pytest


@pytest.fixture(scope="module")
def hub_model():
    built = pathlib.Path("built")
    count = int(built.read_text()) + 1 if built.exists() else 1
    built.write_text(str(count))
    if count == 1:
        raise ConnectionError("[Errno 111] Connection refused")
    return "model"


def test_first(hub_model):
    assert hub_model == "model"


def test_neighbour(hub_model):
    assert hub_model == "model"
"""


def test_a_retry_builds_a_failed_module_fixture_again(pytester: pytest.Pytester) -> None:
    """Old code: pytest raised the module fixture's cached ConnectionError again to the retry (and to the
    neighbour), so the hiccup failed both tests. Now the retry builds it again (twice in all) and passes."""
    result = run(pytester, '[tool.harness]\nretry = ["network"]\nretries = 1\n', MODULE_FIXTURE)
    assert outcomes(result) == {"passed": 2, "rerun": 1}
    assert (pytester.path / "built").read_text() == "2"
    (rerun,) = ledger.read(pytester.path / "ledger").reruns
    assert (rerun["test"], rerun["outcome"], rerun["result"]) == (
        "test_suite.py::test_first",
        "passed",
        "passed",
    )


SKIPS_ON_RETRY = """
import pathlib

import pytest


def test_hub():
    marker = pathlib.Path("tried")
    if marker.exists():
        pytest.skip("hub unreachable: skipped")
    marker.write_text("1")
    raise ConnectionError("[Errno 111] Connection refused")
"""


def test_a_retry_that_skips_is_not_a_pass(pytester: pytest.Pytester) -> None:
    """Old code: the skipped retry counted as the test passing on a retry (flaky), and the run passed."""
    result = run(pytester, '[tool.harness]\nretry = ["network"]\nretries = 2\n', SKIPS_ON_RETRY)
    assert outcomes(result) == {"failed": 1, "rerun": 1}
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (rerun,) = ledger.read(pytester.path / "ledger").reruns
    assert (rerun["outcome"], rerun["result"], rerun["counts"]) == ("skipped", "failed", 1)
    assert "skipped, which is not a pass" in rerun["verdict"]


FLAKY = """
import pathlib

import pytest


def _tries(name):
    marker = pathlib.Path(name)
    count = int(marker.read_text()) + 1 if marker.exists() else 1
    marker.write_text(str(count))
    return count


@pytest.mark.flaky(reruns=2)
def test_marked_flaky():
    assert _tries("marked") == 3, "passes on its third try"


def test_hub_hiccup():
    if _tries("hub") == 1:
        raise ConnectionError("[Errno 111] Connection refused")


def test_plain():
    assert _tries("plain") == 0
"""


@pytest.mark.parametrize("reuse", [False, True], ids=["retry", "retry-and-reuse"])
def test_flaky_markers_keep_their_reruns_beside_retries_and_reuse(
    pytester: pytest.Pytester, reuse: bool
) -> None:
    """A suite whose test carries ``@pytest.mark.flaky(reruns=2)``, with the harness's ``retry`` (and
    reuse) on. Old code: the harness's protocol ran every test, so the marker's reruns were lost and the
    marked test failed the build. Now it keeps its 2 reruns (pytest-rerunfailures runs it), the harness
    retries the network hiccup, and the plain failure runs once. Every try is in the one record (the
    ledger's ``rerun`` events, which report.json, JUnit and pass@1 read), whichever plugin ran it."""
    toml = '[tool.harness]\nretry = ["network"]\nretries = 1\n' + ("reuse = true\n" if reuse else "")
    result = run(pytester, toml, FLAKY)
    assert outcomes(result) == {"passed": 2, "failed": 1, "rerun": 3}
    assert [(pytester.path / name).read_text() for name in ("marked", "hub", "plain")] == ["3", "2", "1"]
    recorded = [
        (
            r["test"].split("::")[1],
            r["attempt"],
            r["policy"],
            r["outcome"],
            r["first_failure_class"],
            r["result"],
        )
        for r in ledger.read(pytester.path / "ledger").reruns
    ]
    assert recorded == [
        ("test_marked_flaky", 2, "pytest-rerunfailures", "failed", "accuracy", "passed"),
        ("test_marked_flaky", 3, "pytest-rerunfailures", "passed", "accuracy", "passed"),
        ("test_hub_hiccup", 2, "failure class", "passed", "network", "passed"),
    ]


FINALIZER_BREAKS = """
import pathlib

import pytest


@pytest.fixture(scope="module")
def hub(request):
    built = pathlib.Path("built")
    count = int(built.read_text()) + 1 if built.exists() else 1
    built.write_text(str(count))
    if count == 1:
        def cleanup():
            raise OSError("cleanup broke")

        request.addfinalizer(cleanup)
        raise ConnectionError("[Errno 111] Connection refused")
    return "model"


def test_first(hub):
    assert hub == "model"


def test_second(hub):
    assert hub == "model"
"""


def test_a_failed_fixtures_broken_finalizer_is_said_and_the_retry_still_builds_it(
    pytester: pytest.Pytester,
) -> None:
    """Hostile: the failed fixture's own finalizer raises when it is finished before the retry. The
    session goes on (no INTERNALERROR), the retry builds the fixture, and the finalizer's error is a
    warning in pytest's summary, not lost."""
    result = run(pytester, '[tool.harness]\nretry = ["network"]\nretries = 1\n', FINALIZER_BREAKS)
    assert outcomes(result) == {"passed": 2, "rerun": 1, "warnings": 1}
    result.stdout.fnmatch_lines(["*fixture hub's finalizer failed before a retry: OSError('cleanup broke')*"])


def test_a_flaky_markers_tries_are_in_every_output(pytester: pytest.Pytester, fake_gpus, monkeypatch) -> None:
    """Through ``harness run``: pytest-rerunfailures' tries are in report.json's reruns, pass@1 counts
    the marked test failed on its first try, and junit.xml has one test case for it (pytest's junitxml
    writes one per try) carrying its two failed tries as ``flakyFailure``."""
    import xml.etree.ElementTree as ElementTree

    from harness.cli import main as harness

    fake_gpus([], vendor="nvidia")
    pytester.makepyprojecttoml(
        '[tool.harness]\nretry = ["network"]\nretries = 1\n[tool.harness.suites.models]\npaths = ["tests"]\n'
    )
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_flaky.py").write_text(FLAKY)
    monkeypatch.chdir(pytester.path)
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 1
    report = json.loads((pytester.path / "out/report.json").read_text())
    assert [(r["test"].split("::")[1], r["policy"]) for r in report["reruns"]] == [
        ("test_marked_flaky", "pytest-rerunfailures"),
        ("test_marked_flaky", "pytest-rerunfailures"),
        ("test_hub_hiccup", "failure class"),
    ]
    cases = [
        (case.get("name"), [child.tag for child in case if child.tag != "properties"])
        for case in ElementTree.parse(pytester.path / "out/junit.xml").iter("testcase")
    ]
    assert sorted(cases) == [
        ("test_hub_hiccup", ["flakyFailure"]),
        ("test_marked_flaky", ["flakyFailure", "flakyFailure"]),
        ("test_plain", ["failure"]),
    ]
    summary = (pytester.path / "out/summary.md").read_text()
    assert "pass@1: 0 of 3 tests passed on their first try; finally 2 passed (2 only on a retry)" in summary
