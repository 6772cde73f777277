"""``harness flaky`` counts every try of every build once: a retried test's tries (a test passing only on
a retry is flaky), a quarantined test's failures (pytest's xfail, recorded as skipped with a class), and a
build given twice, under any path, once. Reports are drawn from the report schema
(``tests/unit/schema_strategies.py``) and read back through the one loader."""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.report import flaky, schema, store
from tests.unit.schema_strategies import of

NOW = datetime.datetime(2026, 12, 5, 12, tzinfo=datetime.UTC)
NODEID = "tests/a.py::test_x"
# one build's tries of the test: passed at once, failed then passed on its retry, failed every try
BUILD = st.sampled_from(["passed", "retried", "failed"])


def report(hours_ago: float, tests: list[dict], reruns: list[dict] = (), platform: str = "cuda") -> dict:
    started = (NOW - datetime.timedelta(hours=hours_ago)).timestamp()
    return {
        "version": 1,
        "generated": started + 60,
        "started": started,
        "suite": "s",
        "shard": None,
        "platform": {"name": platform, "reason": "test"},
        "versions": {"git_commit": "c0ffee"},
        "phases": [],
        "tests": tests,
        "records": [],
        "reruns": list(reruns),
        "starts": {
            "total": {"starts": 0, "failed": 0, "startup_s": 0.0, "by_kind": {}},
            "by_kind": {},
            "by_phase": {},
            "by_file": {},
        },
        "files": {},
    }


def event(drawn: dict, outcome: str, failure_class: str | None = None) -> dict:
    test = {**drawn, "nodeid": NODEID, "file": "tests/a.py", "outcome": outcome, "phase": "p"}
    test.pop("failure_class", None)
    if failure_class:
        test["failure_class"] = failure_class
    return test


def rerun(drawn: dict, attempt: int, outcome: str, first: str) -> dict:
    return {
        **drawn,
        "test": NODEID,
        "attempt": attempt,
        "outcome": outcome,
        "first_outcome": first,
        "phase": "p",
    }


def build_of(kind: str, age: float, draw) -> dict:
    """One build whose tries of the test are ``kind``'s, every other field drawn from the schema."""
    drawn_test, drawn_rerun = draw(of(schema.TestResult)), draw(of(schema.Rerun))
    if kind == "passed":
        return report(age, [event(drawn_test, "passed")])
    final = "passed" if kind == "retried" else "failed"
    return report(age, [event(drawn_test, final)], [rerun(drawn_rerun, 2, final, "failed")])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=st.lists(BUILD, min_size=1, max_size=12), data=st.data())
def test_a_test_passing_only_on_a_retry_is_flaky_to_harness_flaky(kinds: list[str], data) -> None:
    """Each try is a run: vLLM's rule over the tries (at least 5, a failure rate strictly between 10 % and
    90 %) decides, so builds that pass only on a retry make the test flaky."""
    reports = [build_of(kind, hours, data.draw) for hours, kind in enumerate(kinds)]
    history = [run for built in reports for run in flaky.runs(built)]
    tries = sum(1 if kind == "passed" else 2 for kind in kinds)
    failed = sum({"passed": 0, "retried": 1, "failed": 2}[kind] for kind in kinds)
    assert len(history) == tries and sum(not run.passed for run in history) == failed
    found = flaky.flaky(history, NOW)
    assert bool(found) == (tries >= flaky.MIN_RUNS and flaky.LOW < failed / tries < flaky.HIGH)
    if kinds.count("retried") >= 3 and "failed" not in kinds:  # passes every build, some only on retry
        assert [entry["test_id"] for entry in found] == [NODEID]


def written(tmp_path: Path, reports: list[dict]) -> list[str]:
    paths = []
    for index, built in enumerate(reports):
        path = tmp_path / f"b{index}" / "report.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(built))
        store.load(path)  # every one a report the loader takes
        paths.append(str(path))
    return paths


def harness_flaky(*args: str) -> tuple[int, dict | None, str]:
    done = subprocess.run([sys.executable, "-m", "harness", "flaky", *args], capture_output=True, text=True)
    return done.returncode, json.loads(done.stdout) if done.stdout else None, done.stderr


def test_a_quarantined_test_failing_half_its_builds_stays_quarantined(tmp_path: Path) -> None:
    """Its failures are pytest's xfail (skipped, with their class): they count, so it neither leaves
    quarantine after 5 recorded passes nor drops out of the flaky list."""
    reports = [
        report(
            10 - i,
            [
                {
                    "t": 1.0,
                    "nodeid": NODEID,
                    "file": "tests/a.py",
                    "outcome": outcome,
                    "worker": None,
                    "device": None,
                    "phase": "p",
                    **({"failure_class": "accuracy"} if outcome == "skipped" else {}),
                }
            ],
        )
        for i, outcome in enumerate(["skipped", "passed"] * 5)
    ]
    current = tmp_path / "quarantined_tests.json"
    current.write_text(json.dumps({"entries": [{"test_id": NODEID, "backend": "cuda"}]}))
    code, document, err = harness_flaky(*written(tmp_path, reports), "--quarantine", str(current))
    assert code == 0, err
    assert [entry["test_id"] for entry in document["entries"]] == [NODEID]
    assert "0 back from quarantine" in err


def test_the_same_build_given_twice_counts_once(tmp_path: Path) -> None:
    """Three builds, one failing: 3 runs, too few to judge. Each given twice (once a copy elsewhere) is
    still three builds, not six runs with a 33 % failure rate."""
    reports = [
        report(
            hours,
            [
                {
                    "t": 1.0,
                    "nodeid": NODEID,
                    "file": "tests/a.py",
                    "outcome": outcome,
                    "worker": None,
                    "device": None,
                    "phase": "p",
                }
            ],
        )
        for hours, outcome in enumerate(["failed", "passed", "passed"])
    ]
    paths = written(tmp_path, reports)
    copy = tmp_path / "copy"
    shutil.copytree(Path(paths[0]).parent, copy)
    code, document, err = harness_flaky(*paths, *paths[1:], str(copy))
    assert code == 0, err
    assert document["entries"] == []
    assert "3 reports (3 given twice, counted once)" in err
