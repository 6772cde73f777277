"""Quarantine (harness.quarantine, the plugin's quarantine module) and ``harness flaky``: quarantined tests
run, are reported and do not gate; an entry past its date gates again; vLLM's detector's rule over the
reports CI keeps; hostile lists are one line."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import quarantine
from harness.errors import ConfigError, HarnessError
from harness.report import flaky, store

pytest_plugins = ["pytester"]
NOW = datetime.datetime(2026, 12, 5, 12, tzinfo=datetime.UTC)
TODAY = NOW.date()

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
ENTRY_KEYS = st.sampled_from(["test_id", "backend", "reason", "fail_rate", "x"])


@given(st.dictionaries(st.just("entries"), st.lists(st.dictionaries(ENTRY_KEYS, JSON, max_size=4))) | JSON)
def test_any_json_is_a_quarantine_or_one_line(document: object) -> None:
    try:
        entries = quarantine.from_vllm(document, "q.json")
    except ConfigError as error:
        assert "\n" not in str(error) and str(error).startswith("q.json")
    else:
        assert all(entry.test.strip() and entry.platform for entry in entries)


@given(
    st.lists(st.one_of(JSON, st.dictionaries(st.sampled_from(["test", "until", "platform", "reason"]), JSON)))
)
def test_any_settings_list_is_a_quarantine_or_one_line(values: list) -> None:
    try:
        quarantine.from_settings(values)
    except ConfigError as error:
        assert "\n" not in str(error) and str(error).startswith("[tool.harness] quarantine[")


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b"[]",
        b'{"entries": {}}',
        b'{"entries": [{"test_id": "t", "backend": "tpu"}]}',
        b"NaN",
        b"\xff",
    ],
)
def test_a_hostile_file_is_one_line(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "q.json"
    path.write_bytes(content)
    with pytest.raises(HarnessError) as caught:
        store.quarantine_list(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_not_a_regular_file_is_one_line(tmp_path: Path) -> None:
    for path in (Path("/dev/zero"), tmp_path):
        with pytest.raises(HarnessError, match="not a regular file|is a directory"):
            store.quarantine_list(path)


@pytest.mark.parametrize(
    ("entry", "nodeid", "covered"),
    [
        ("tests/m/test_a.py::test_x", "tests/m/test_a.py::test_x", True),
        ("m/test_a.py::test_x", "tests/m/test_a.py::test_x", True),  # as vLLM's CI runs it, from tests/
        ("test_a.py::test_x", "tests/m/test_a.py::test_x[1-2]", True),  # every parametrisation
        ("m/test_a.py::test_x", "tests/m/test_a.py::test_xy", False),
        ("a.py::test_x", "tests/m/test_a.py::test_x", False),  # a path part, not a suffix of one
        ("tests/m/test_a.py::test_x[1]", "tests/m/test_a.py::test_x[2]", False),
    ],
)
def test_an_entry_covers_a_node_id_as_pytest_or_vllms_ci_writes_it(
    entry: str, nodeid: str, covered: bool
) -> None:
    assert quarantine.Entry(entry, "list").covers(nodeid) is covered


def test_dates_and_platforms() -> None:
    entries = quarantine.from_settings(
        [
            {"test": "a.py::t", "until": "2026-12-05"},  # today: still held
            {"test": "b.py::t", "until": "2026-12-04", "reason": "hub outage"},
            {"test": "c.py::t", "platform": "rocm"},
            {"test": "d.py::t", "platform": "intel"},  # vLLM's name for xpu
            "e.py::t",
        ]
    )
    mine = [entry for entry in entries if entry.on("xpu")]
    decided = quarantine.decide([f"{name}.py::t" for name in "abcde"], mine, TODAY)
    assert sorted(decided.held) == ["a.py::t", "d.py::t", "e.py::t"]
    assert [entry.test for entry in decided.ended] == ["b.py::t"]


def history(tests: int, builds: list[tuple[int, int]]) -> list[flaky.Run]:
    """``builds``: (seconds before NOW, bitmask of failing tests)."""
    return [
        flaky.Run(f"t.py::test_{i}", "cuda", not (failed >> i) & 1, NOW - datetime.timedelta(seconds=age))
        for age, failed in builds
        for i in range(tests)
    ]


# builds at distinct times (two builds of one second have no order to take "the last 5" by)
BUILDS = st.lists(
    st.tuples(st.integers(0, 10 * 24 * 3600), st.integers(0, 7)),
    max_size=25,
    unique_by=lambda build: build[0],
)


@given(BUILDS)
def test_flaky_agrees_with_vllms_rule(builds: list[tuple[int, int]]) -> None:
    """vLLM's detector: within 7 days, ≥ 5 runs, 10 % < failure rate < 90 %."""
    runs = history(3, builds)
    got = {entry["test_id"]: entry for entry in flaky.flaky(runs, NOW)}
    for i in range(3):
        recent = [age for age, _ in builds if age <= 7 * 24 * 3600]
        fails = sum((failed >> i) & 1 for age, failed in builds if age <= 7 * 24 * 3600)
        rule = len(recent) >= 5 and 0.1 < fails / len(recent) < 0.9
        assert (f"t.py::test_{i}" in got) is rule
        if rule:
            assert got[f"t.py::test_{i}"]["total_runs"] == len(recent)


@given(BUILDS)
def test_back_from_quarantine_after_five_passes_in_a_row(builds: list[tuple[int, int]]) -> None:
    runs = history(1, builds)
    entry = quarantine.Entry("t.py::test_0", "q.json", platform="cuda")
    recent = sorted((age, failed & 1) for age, failed in builds if age <= 7 * 24 * 3600)[:5]  # newest first
    assert flaky.back(entry, runs, NOW) is (len(recent) == 5 and not any(failed for _, failed in recent))


ROOT = Path(__file__).resolve().parents[2]


def report(path: Path, started: datetime.datetime, outcomes: dict[str, str], platform: str = "rocm") -> Path:
    """A build's report: a real one of this project's (docs/runs), its tests and time replaced."""
    body = json.loads((ROOT / "docs/runs/pooling-cpu.json").read_text())
    template = body["tests"][0]
    body["tests"] = [
        {**template, "nodeid": nodeid, "file": nodeid.split("::")[0], "outcome": outcome}
        for nodeid, outcome in outcomes.items()
    ]
    body["started"] = body["generated"] = started.timestamp()
    body["platform"] = {"name": platform, "reason": "forced"}
    path.mkdir(parents=True)
    (path / "report.json").write_text(json.dumps(body))
    return path


def test_harness_flaky_over_builds_writes_vllms_file(tmp_path: Path) -> None:
    """Six builds of a week on ROCm: one test failing in two of them is flaky, one failing always is
    broken (not flaky), and the quarantined one that passed the last five comes back."""
    dirs = []
    for build in range(6):
        outcomes = {
            "tests/a.py::test_sometimes": "failed" if build in (1, 4) else "passed",
            "tests/a.py::test_broken": "failed",
            "tests/a.py::test_mended": "failed" if build == 0 else "passed",
            "tests/a.py::test_skipped": "skipped",
        }
        dirs.append(report(tmp_path / f"b{build}", NOW - datetime.timedelta(hours=6 - build), outcomes))
    current = tmp_path / "quarantined_tests.json"
    current.write_text(json.dumps({"entries": [{"test_id": "tests/a.py::test_mended", "backend": "rocm"}]}))
    out = tmp_path / "new.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "flaky",
            *map(str, dirs),
            "--quarantine",
            str(current),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text())
    assert [(e["test_id"], e["backend"], e["total_runs"]) for e in written["entries"]] == [
        ("tests/a.py::test_sometimes", "rocm", 6)
    ]
    assert "1 quarantined (1 newly flaky), 1 back from quarantine" in done.stderr
    assert quarantine.from_vllm(written, "new.json")  # the run reads it back


def test_harness_flaky_on_a_bad_report_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "report.json"
    bad.write_text('{"version": 1}')
    done = subprocess.run(
        [sys.executable, "-m", "harness", "flaky", str(bad)], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "harness: error:" in done.stderr


QUARANTINED = """
def test_quarantined_fails():
    raise AssertionError("fails on purpose: the quarantine must keep it from gating")

def test_quarantined_passes():
    pass

def test_expired_fails():
    raise AssertionError("fails on purpose: its quarantine has ended")
"""


def test_a_quarantined_failure_runs_is_reported_and_does_not_gate(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_q=QUARANTINED)
    pytester.makepyprojecttoml(
        """
        [tool.harness]
        quarantine = [
            {test = "test_q.py::test_quarantined_fails", reason = "flaky on MI300"},
            "test_q.py::test_quarantined_passes",
        ]
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "quarantined", "-rxX")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*2 quarantined tests run without gating*",
            "XFAIL test_q.py::test_quarantined_fails - quarantined (*): flaky on MI300",
        ]
    )
    result.assert_outcomes(xfailed=1, xpassed=1)


def test_an_expired_entry_gates_again(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_q=QUARANTINED)
    pytester.makepyprojecttoml(
        """
        [tool.harness]
        quarantine = [{test = "test_q.py::test_expired_fails", until = "2020-01-01"}]
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "expired")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["*quarantine of test_q.py::test_expired_fails ended 2020-01-01: it gates again*"]
    )


def test_a_bad_quarantine_setting_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_q=QUARANTINED)
    pytester.makepyprojecttoml('[tool.harness]\nquarantine = [{test = "x", until = "soon"}]\n')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*quarantine[[]0[]] until: expected a date (YYYY-MM-DD), got 'soon'*"])


def test_vllms_file_quarantines_on_its_backend_only(pytester: pytest.Pytester) -> None:
    """vLLM's detector's file, its test ids as vLLM's CI names them (from tests/): this platform's entry
    holds, the other backend's does not."""
    pytester.mkdir("tests")
    pytester.path.joinpath("tests", "test_q.py").write_text(QUARANTINED)
    entries = [
        {"test_id": "test_q.py::test_quarantined_fails", "backend": "cpu", "fail_rate": 0.4},
        {"test_id": "test_q.py::test_expired_fails", "backend": "rocm", "fail_rate": 0.5},
    ]
    pytester.path.joinpath("quarantined_tests.json").write_text(json.dumps({"entries": entries}))
    pytester.makepyprojecttoml('[tool.harness]\nquarantine_file = "quarantined_tests.json"\n')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "fails")
    result.stdout.fnmatch_lines(["*1 quarantined tests run without gating*"])
    result.assert_outcomes(xfailed=1, failed=1)
    assert result.ret == 1


def test_harness_flaky_reads_this_projects_real_reports() -> None:
    """The reports of this project's own suites (docs/runs): read through the loader, judged, written in
    vLLM's format (a single build of each is no history of flakiness: nothing is quarantined)."""
    runs = sorted(str(path) for path in (ROOT / "docs/runs").glob("*.json"))
    done = subprocess.run([sys.executable, "-m", "harness", "flaky", *runs], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["entries"] == []
    assert f"{len(runs)} reports, 0 quarantined" in done.stderr


@pytest.mark.parametrize("expired_last", [True, False])
def test_the_latest_entry_for_a_test_decides(pytester: pytest.Pytester, expired_last: bool) -> None:
    """An ended entry beside one that holds: the one listed last decides, and what the run says agrees with
    what it does (an ended one that decides gates, and says so; one that does not decide is not said)."""
    pytester.makepyfile(test_q=QUARANTINED)
    entries = [
        '"test_q.py::test_expired_fails"',
        '{test = "test_q.py::test_expired_fails", until = "2020-01-01"}',
    ]
    listed = ", ".join(entries if expired_last else entries[::-1])
    pytester.makepyprojecttoml(f"[tool.harness]\nquarantine = [{listed}]\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "expired")
    said = "*quarantine of test_q.py::test_expired_fails ended 2020-01-01: it gates again*"
    if expired_last:
        assert result.ret == 1
        result.stdout.fnmatch_lines([said])
    else:
        assert result.ret == 0
        result.stdout.no_fnmatch_line(said)
        result.stdout.fnmatch_lines(["*1 quarantined tests run without gating*"])


def test_counts_are_of_the_suites_tests_not_entries(pytester: pytest.Pytester) -> None:
    """One entry without parameters covers three parametrisations; an entry for a test not in the suite
    counts nothing."""
    pytester.makepyfile(
        test_p="import pytest\n\n@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_p(n):\n    assert n < 2\n"
    )
    pytester.makepyprojecttoml('[tool.harness]\nquarantine = ["test_p.py::test_p", "test_gone.py::test_x"]\n')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*harness: 3 quarantined tests run without gating*"])


CRASHING = """
import os

def test_crash():
    os._exit(3)

def test_fine():
    pass
"""


def test_a_quarantined_tests_crash_under_xdist_does_not_fail_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_c=CRASHING)
    pytester.makepyprojecttoml('[tool.harness]\nquarantine = ["test_c.py::test_crash"]\n')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "1", "-rxX")
    assert result.ret == 0, result.stdout.str()[-2000:]
    result.stdout.fnmatch_lines(["*XFAIL*test_c.py::test_crash*quarantined*"])


SERIAL = """
[tool.harness]
quarantine = ["tests/test_c.py::test_crash"]
{extra}
[tool.harness.suites.models]
paths = ["tests"]

[[tool.harness.suites.models.phases]]
name = "p"
workers = "serial"
"""


@pytest.fixture
def project(pytester: pytest.Pytester, fake_gpus):
    fake_gpus([], vendor="nvidia")
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_c.py").write_text(CRASHING)
    return pytester.path


def test_a_quarantined_tests_crash_in_a_serial_phase_does_not_fail_harness_run(project: Path) -> None:
    """Its process dies: the crash is recorded (its xfail, skipped with its class ``crashed``, a failed try
    for ``harness flaky``), the phase resumes, and the run passes as the test's own failure would have let
    it."""
    (project / "pyproject.toml").write_text(SERIAL.format(extra=""))
    from harness.cli import main as harness

    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 0
    report = json.loads((project / "out" / "report.json").read_text())
    assert {t["nodeid"]: t["outcome"] for t in report["tests"]} == {
        "tests/test_c.py::test_crash": "skipped",
        "tests/test_c.py::test_fine": "passed",
    }


@pytest.mark.parametrize("content", [None, "{not json", '{"entries": [{"test_id": "x", "backend": "mars"}]}'])
def test_a_missing_or_bad_quarantine_file_is_one_line_before_any_phase(
    project: Path, capsys, content
) -> None:
    (project / "pyproject.toml").write_text(SERIAL.format(extra='quarantine_file = "q.json"'))
    if content is not None:
        (project / "q.json").write_text(content)
    from harness.cli import main as harness

    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("harness: error: ") and "q.json" in err
    assert not (project / "out").exists()  # before any phase: no run directory, no report


ENTRY = st.builds(
    lambda test, until: quarantine.Entry(test, "list", until),
    st.sampled_from(["a.py::t", "a.py::t[1]", "t", "b.py::t", "x/a.py::t"]),
    st.none() | st.dates(datetime.date(2026, 12, 1), datetime.date(2026, 12, 9)),
)
NODEIDS = st.lists(
    st.sampled_from(["a.py::t", "a.py::t[1]", "a.py::t[2]", "x/a.py::t", "b.py::t"]), unique=True
)


@given(entries=st.lists(ENTRY, max_size=6), nodeids=NODEIDS, last=ENTRY)
def test_the_latest_entry_decides_and_what_is_said_is_what_is_done(entries, nodeids, last) -> None:
    """Whatever came before, an entry listed last decides each test it covers; the tests held are the
    suite's (each once), and each ended entry said decides for a test that then gates."""
    decided = quarantine.decide(nodeids, [*entries, last], TODAY)
    for nodeid in nodeids:
        if last.covers(nodeid):
            assert (nodeid in decided.held) == last.holds(TODAY)
    assert set(decided.held) <= set(nodeids)
    for entry in decided.ended:
        assert not entry.holds(TODAY)
        assert any(
            nodeid not in decided.held and quarantine.deciding(nodeid, [*entries, last]) == entry
            for nodeid in nodeids
        )
    said = decided.lines()
    assert bool(decided.held) == any("quarantined tests run without gating" in line for line in said)
    assert len(said) == bool(decided.held) + len(decided.ended)
