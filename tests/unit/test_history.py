"""A previous run as ``harness run --history`` (harness.run.history): a first run without one says so and
runs; with one, the tests that failed there run first in every shard, the split is weighed by its
durations, and the summary says how many and how soon the first failure came; hostile history (missing,
corrupt, of another suite or platform, huge) is one summary line and the run goes on without it."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.report.history_lines import first_failure_s, lines
from tests.unit.test_shards import harness_run

pytest_plugins = ["pytester"]

PYPROJECT = """
[tool.harness.suites.tiny]
paths = ["checks"]
phases = [{name = "all", workers = "serial"}]

[tool.pytest.ini_options]
python_files = ["check_*.py"]
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A tiny real suite: three files, one test that fails when FAIL names it."""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    checks = tmp_path / "checks"
    checks.mkdir()
    for name in ("a", "b", "c"):
        (checks / f"check_{name}.py").write_text(
            textwrap.dedent(f"""
            import os, time

            def test_1():
                time.sleep(0.05)

            def test_2():
                assert os.environ.get("FAIL") != "{name}"
            """)
        )
    return tmp_path


def _order(out: Path) -> list[str]:
    tests = json.loads((out / "report.json").read_text())["tests"]
    return [test["nodeid"] for test in sorted(tests, key=lambda test: test["t"])]


def test_a_first_run_says_it_has_no_history_and_runs(project):
    """Old code: --history was no option (exit 2)."""
    done = harness_run(project, "tiny", "--history", "harness-baseline/tiny-cpu", "--out", "first")
    assert done.returncode == 0, done.stderr
    summary = (project / "first" / "summary.md").read_text()
    assert "no history: harness-baseline/tiny-cpu" in summary
    assert "no such" in summary


def test_the_tests_that_failed_last_time_run_first_in_every_shard(project):
    """The base run's failure (check_c.py::test_2) runs first next time, with its file (its siblings);
    the summary says how many ran first and when the first failure came."""
    base = harness_run(project, "tiny", "--out", "base", FAIL="c")
    assert base.returncode == 1, base.stderr
    again = harness_run(project, "tiny", "--out", "again", HARNESS_HISTORY="base", FAIL="c")
    assert again.returncode == 1, again.stderr
    assert _order(project / "again")[:2] == ["checks/check_c.py::test_2", "checks/check_c.py::test_1"]
    summary = (project / "again" / "summary.md").read_text()
    assert (
        "History: `base`: 1 tests failed there; the 1 of them in this run ran first, with the tests"
        in summary
    )
    report = json.loads((project / "again" / "report.json").read_text())
    first = first_failure_s(report)
    assert first == min(test["t"] for test in report["tests"]) - report["started"]  # the first result
    assert f"first failure {first:.1f} s after the run's start" in summary
    for index in range(2):  # each shard orders its own tests: the failure first where it lands
        out = project / f"shard{index}"
        done = harness_run(project, "tiny", "--shard", f"{index}/2", "--history", "base", "--out", str(out))
        order = _order(out)
        if "checks/check_c.py::test_2" in order:
            assert order[0] == "checks/check_c.py::test_2", done.stdout
        split = json.loads((out / "phases.json").read_text())["split"]
        assert split["source"] == "report base"


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: None, "no such"),
        (lambda p: (p / "h.json").write_text('{"version": 1, "tests": ['), "truncated"),
        (lambda p: (p / "h.json").write_text("[]"), "not a"),
        (lambda p: os.truncate(p / "h.json", 300 * 2**20) if (p / "h.json").touch() is None else 0, "larger"),
    ],
)
def test_hostile_history_is_one_line_and_the_run_goes_on(project, make, said):
    make(project)
    done = harness_run(project, "tiny", "--history", "h.json", "--out", "out")
    assert done.returncode == 0, done.stderr
    summary = (project / "out" / "summary.md").read_text()
    note = [line for line in summary.splitlines() if line.startswith("no history: h.json")]
    assert len(note) == 1 and said in note[0], summary
    assert "Traceback" not in done.stderr


def test_a_history_of_another_suite_or_platform_is_not_used(project):
    base = harness_run(project, "tiny", "--out", "base", FAIL="a")
    assert base.returncode == 1
    report = json.loads((project / "base" / "report.json").read_text())
    report["platform"]["name"] = "cuda"
    (project / "cuda.json").write_text(json.dumps(report))
    done = harness_run(project, "tiny", "--history", "cuda.json", "--out", "out")
    assert done.returncode == 0
    summary = (project / "out" / "summary.md").read_text()
    assert "no history: cuda.json is of suite 'tiny' on 'cuda', this run is 'tiny' on 'cpu'" in summary
    assert _order(project / "out")[0] == "checks/check_a.py::test_1"  # pytest's order


def test_the_summary_lines_without_history_and_without_failures():
    report = {"tests": [{"nodeid": "a", "t": 12.0, "outcome": "passed"}], "started": 10.0}
    assert lines(report) == []  # type: ignore[arg-type]
    report["history"] = {"source": "h", "failed": ["a", "gone"]}
    assert lines(report)[0] == (  # type: ignore[arg-type]
        "History: `h`: 2 tests failed there; the 1 of them in this run ran first, with the tests that share "
        "their engines; no test failed."
    )


def test_of_several_places_the_first_usable_one_is_the_history(tmp_path):
    """CI names a pull request's previous attempt, then the base branch's report: a missing or broken
    first one is passed over, and every reason is said when none is usable."""
    from harness.report.previous import first_usable

    good = str(Path(__file__).resolve().parents[2] / "docs" / "runs" / "pooling-cpu.json")
    (tmp_path / "broken.json").write_text("{")
    missing, broken = str(tmp_path / "missing"), str(tmp_path / "broken.json")
    found = first_usable(f"{missing}:{broken}:{good}", "pooling", ("cpu",), what="--history")
    assert found.note is None and found.record() == {"source": good, "failed": []}
    record = first_usable(f"{missing}:{broken}", "pooling", ("cpu",), what="--history").record()
    assert record["note"].startswith("no history: ")
    assert "no such" in record["note"] and "truncated" in record["note"]


def test_a_history_path_reaches_the_summary_as_text():
    report = {
        "tests": [],
        "started": 1.0,
        "history": {"source": "<img src=x>`|", "note": "no history: <script>"},
    }
    assert lines(report) == ["no history: &lt;script&gt;; the run goes on without it.", ""]  # type: ignore[arg-type]
    del report["history"]["note"]  # type: ignore[attr-defined]
    assert lines(report)[0].startswith("History: `<img src=x>'\\|`: 0 tests")  # type: ignore[arg-type]


def test_a_shard_without_the_failed_tests_says_none_of_them_ran_here():
    report = {"tests": [], "started": 1.0, "history": {"source": "h", "failed": ["a.py::t"]}}
    assert lines(report)[0] == (  # type: ignore[arg-type]
        "History: `h`: 1 tests failed there; none of them in this run; no test failed."
    )


@settings(max_examples=500, deadline=None)
@given(
    took=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**20), 10**20)),
    bound=st.floats(min_value=1.0, max_value=1e7),
)
def test_a_per_test_timeout_is_bounded_and_above_the_recorded_seconds(took, bound):
    from harness.report.previous import LEAST_S, timeout_s

    value = timeout_s(took, bound)
    assert min(LEAST_S, bound) <= value <= bound
    if isinstance(took, int | float) and 0 <= took < bound / 2 - 60:  # room for the factor and margin
        assert value > took


def test_the_run_gives_each_recorded_test_its_timeout_from_the_history(project):
    """Old code: no such option (exit 2)."""
    base = harness_run(project, "tiny", "--out", "base")
    assert base.returncode == 0, base.stderr
    done = harness_run(project, "tiny", "--history", "base", "--timeouts-from-history", "--out", "again")
    assert done.returncode == 0, done.stderr
    timeouts = json.loads((project / "again" / "test-timeouts.json").read_text())
    assert set(timeouts) == {f"checks/check_{n}.py::test_{i}" for n in "abc" for i in (1, 2)}
    assert all(60 <= seconds <= 900 for seconds in timeouts.values())


def test_the_plugin_gives_a_test_its_own_timeout_unless_it_or_the_user_set_one(pytester, monkeypatch):
    pytester.makepyfile(
        test_s="""
        import time, pytest

        def test_slow():
            time.sleep(3)

        @pytest.mark.timeout(30)
        def test_marked():
            time.sleep(3)
        """
    )
    path = pytester.path / "timeouts.json"
    path.write_text(json.dumps({"test_s.py::test_slow": 1.0, "test_s.py::test_marked": 1.0}))
    monkeypatch.setenv("HARNESS_TEST_TIMEOUTS", str(path))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--harness")
    result.assert_outcomes(passed=1, failed=1)  # test_slow timed out at its 1 s; the marked one kept 30
    result.stdout.fnmatch_lines(["*Timeout*"])
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--harness", "--timeout", "60")
    result.assert_outcomes(passed=2)  # the user's --timeout holds
