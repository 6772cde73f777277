"""Careless and hostile inputs to issue 58's features, as a new user gives them: failure classes and
retries in the settings, quarantine lists and files, ``harness flaky``, ``--history``/``--durations-from``/
``--timeouts-from-history``, and ``harness merge``. The rule for every case: bad input is one line naming
the problem and exit 2 (never a traceback, never exit 1, no data lost, nothing left hanging); a genuine
failure never exits 0; input that is merely unusual (spaces, unicode, a report given twice) works."""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path

import pytest

from harness.cli import main as harness
from tests.unit.test_flaky import report as flaky_report

pytest_plugins = ["pytester"]
NODEID = "tests/test_t.py::test_x"
pytestmark = pytest.mark.timeout(120)  # a FIFO read by mistake would hang: the marker ends it, failed


def one_line(capsys, code: int, *argv: str) -> str:
    """Run ``harness argv`` in this process: exit 2 and one ``harness``/usage line on stderr, no traceback."""
    got = harness(list(argv))
    err = capsys.readouterr().err
    assert got == code, (argv, got, err[-2000:])
    assert "Traceback" not in err, err
    if code == 2:
        assert err.count("\n") == 1, err
    return err


def build(hours: float, outcome: str = "passed", **fields) -> dict:
    """A report the loader takes: one test of ``outcome``, suite ``models`` on the CPU."""
    test = {"t": 1.0, "nodeid": NODEID, "file": "tests/test_t.py", "outcome": outcome, "phase": "p"}
    test.update({"worker": None, "device": None, "setup_s": 0.0, "call_s": 1.0, "teardown_s": 0.0})
    made = flaky_report(hours, [test], platform="cpu")
    return {**made, "suite": "models", **fields}


def save(path: Path, content: object) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def fifo(path: Path) -> str:
    os.mkfifo(path)
    return str(path)


# --- harness flaky -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("", "empty"),
        ("{", "report"),
        ("[]", "expected an object"),
        ('{"version": 1, "tests": 5}', "report"),
        ('{"version": 1.0}', "version"),
        ('{"version": NaN}', "NaN"),
        ("null", "expected an object"),
    ],
)
def test_flaky_a_report_that_is_no_report_is_one_line(tmp_path, capsys, content, said) -> None:
    err = one_line(capsys, 2, "flaky", save(tmp_path / "r.json", content))
    assert said.lower() in err.lower()


def test_flaky_a_field_of_the_wrong_kind_is_one_line(tmp_path, capsys) -> None:
    for change in (
        {"tests": [{"nodeid": NODEID, "outcome": "passed"}]},  # fields missing
        {"started": float("inf")},  # json.dumps writes Infinity
        {"started": -5},
        {"reruns": [{"test": NODEID, "attempt": -1}]},
        {"merged_from": "all"},
        {"merged_from": [{"shard": 3}]},
        {"platform": {"name": ["cpu"], "reason": "x"}},
    ):
        err = one_line(capsys, 2, "flaky", save(tmp_path / "r.json", build(1, **change)))
        assert "r.json" in err


def test_flaky_not_a_regular_file_anywhere_is_one_line_and_never_blocks(tmp_path, capsys) -> None:
    good = save(tmp_path / "good.json", build(1))
    pipe = fifo(tmp_path / "pipe")
    one_line(capsys, 2, "flaky", pipe)
    one_line(capsys, 2, "flaky", str(tmp_path))  # a directory without report.json
    one_line(capsys, 2, "flaky", good, "--quarantine", pipe)
    one_line(capsys, 2, "flaky", good, "--quarantine", str(tmp_path))
    one_line(capsys, 2, "flaky", good, "--out", pipe)
    one_line(capsys, 2, "flaky", good, "--out", str(tmp_path))
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)  # still the FIFO it was: never replaced by a file
    one_line(capsys, 2, "flaky", good, "--out", "/dev/null")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    one_line(capsys, 2, "flaky", str(tmp_path / "missing.json"))


@pytest.mark.parametrize(
    "quarantine",
    [
        {"entries": "x"},
        {"entries": [{"test_id": "", "backend": "cpu"}]},
        {"entries": [{"test_id": NODEID, "backend": "mars"}]},
        {"entries": [{"test_id": 5, "backend": "cpu"}]},
        {"entries": [None]},
        {},
        [],
    ],
)
def test_flaky_a_bad_quarantine_file_is_one_line(tmp_path, capsys, quarantine) -> None:
    good = save(tmp_path / "good.json", build(1))
    one_line(capsys, 2, "flaky", good, "--quarantine", save(tmp_path / "q.json", quarantine))


def test_flaky_unusual_paths_and_a_report_given_twice_work(tmp_path, capsys) -> None:
    """Spaces and unicode in every path; the same report under two paths counts once; the list written
    where asked, an existing file replaced whole."""
    folder = tmp_path / "bü ild ☃"
    reports = [
        save(folder / f"r {i}" / "report.json", build(i, "failed" if i % 2 else "passed")) for i in range(6)
    ]
    out = folder / "quarantined tests.json"
    out.write_text("old")
    one_line(capsys, 0, "flaky", *reports, reports[1], str(folder / "r 1"), "--out", str(out))
    document = json.loads(out.read_text())
    assert [entry["test_id"] for entry in document["entries"]] == [NODEID]  # 3 of 6 failed: 50 %
    assert document["entries"][0]["total_runs"] == 6


def test_flaky_reports_that_share_some_shards_but_not_all_are_one_line(tmp_path, capsys) -> None:
    """Two merged reports holding one shard in common and one each of their own cannot be counted without
    counting that shard twice or dropping one: refused, never a silent double count."""
    parts = [{"shard": None, "started": 100.0 + i, "generated": 200.0 + i} for i in range(3)]
    first = save(tmp_path / "a.json", build(1, merged_from=parts[:2]))
    second = save(tmp_path / "b.json", build(2, merged_from=parts[1:]))
    err = one_line(capsys, 2, "flaky", first, second)
    assert "a.json" in err and "b.json" in err


# --- settings: failure classes, retries, quarantine --------------------------------------------------

PROJECT = """
[tool.harness]
{settings}
[tool.harness.suites.models]
paths = ["tests"]

[[tool.harness.suites.models.phases]]
name = "p"
workers = "serial"
"""


@pytest.fixture
def project(pytester: pytest.Pytester, fake_gpus):
    """A suite of one passing and one failing test; ``write(settings)`` sets its ``[tool.harness]``."""
    fake_gpus([], vendor="nvidia")
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_t.py").write_text(
        "def test_x():\n    pass\n\ndef test_y():\n    assert 0\n"
    )

    def write(settings: str = "") -> Path:
        (pytester.path / "pyproject.toml").write_text(PROJECT.format(settings=settings))
        return pytester.path

    return write


@pytest.mark.parametrize(
    "settings",
    [
        'retry = ["nonsense"]',
        'retry = "network"',
        "retry = [1]",
        'retry = [""]',
        "retries = 0",
        "retries = 1e400",
        "retry_delay_s = nan",
        "retry_delay_s = -1",
        'failure_patterns = {nonsense = ["x"]}',
        'failure_patterns = {network = "x"}',
        'failure_patterns = {network = ["("]}',
        'quarantine = [""]',
        "quarantine = [5]",
        'quarantine = [{test = "a", until = "2026-13-45"}]',
        'quarantine = [{test = "a", platform = "mars"}]',
        'quarantine = [{test = "a", colour = "red"}]',
        'quarantine = "tests/test_t.py::test_y"',
        'quarantine_file = "tests"',
        'quarantine_file = "missing.json"',
    ],
)
def test_a_bad_setting_is_one_line_before_any_phase(project, capsys, settings) -> None:
    root = project(settings)
    one_line(capsys, 2, "run", "--platform", "cpu", "--out", "out", "models")
    assert not (root / "out").exists()


def test_a_quarantine_file_that_is_a_fifo_is_one_line_and_never_blocks(project, capsys) -> None:
    root = project('quarantine_file = "q pipe"')
    fifo(root / "q pipe")
    one_line(capsys, 2, "run", "--platform", "cpu", "--out", "out", "models")


def test_a_genuine_failure_never_exits_0(project, capsys) -> None:
    """Retries asked for other classes, duplicated; an ended quarantine and one for another platform:
    the failing test gates (exit 1)."""
    project(
        'retry = ["network", "network"]\n'
        'quarantine = [{test = "tests/test_t.py::test_y", until = "2020-01-01"},'
        ' {test = "tests/test_t.py::test_y", platform = "cuda"}]'
    )
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_a_quarantine_file_under_a_unicode_path_with_spaces_holds(project, capsys) -> None:
    root = project('quarantine_file = "lists ☃/q uarantine.json"')
    save(
        root / "lists ☃" / "q uarantine.json",
        {"entries": [{"test_id": "tests/test_t.py::test_y", "backend": "cpu"}]},
    )
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 0


# --- history: --history, --durations-from, --timeouts-from-history ------------------------------------


@pytest.mark.parametrize(
    "content",
    ["", "{", "[]", '{"version": 1}', '{"tests/test_t.py::test_x": NaN}', '{"tests/test_t.py::test_x": -1}'],
)
def test_durations_from_a_file_that_is_no_history_is_one_line_before_any_phase(
    project, capsys, content
) -> None:
    root = project()
    path = save(root / "d.json", content)
    err = one_line(capsys, 2, "run", "--platform", "cpu", "--out", "out", "--durations-from", path, "models")
    assert "d.json" in err
    assert not (root / "out").exists()


def test_durations_from_not_a_regular_file_is_one_line_and_never_blocks(project, capsys) -> None:
    root = project()
    for given in (fifo(root / "pipe"), str(root / "tests"), str(root / "missing")):
        one_line(capsys, 2, "run", "--platform", "cpu", "--out", "out", "--durations-from", given, "models")


def test_a_report_with_a_hostile_field_is_one_line_as_durations(project, capsys) -> None:
    root = project()
    bad = build(1)
    bad["tests"][0]["call_s"] = 1e300
    path = save(root / "r.json", bad)
    one_line(capsys, 2, "run", "--platform", "cpu", "--out", "out", "--durations-from", path, "models")


def test_conflicting_history_flags_are_refused(project, capsys) -> None:
    """``--history`` beside ``--durations-from`` would drop one: refused. ``--timeouts-from-history`` with
    nothing to learn from is refused too, not silently a run without learned timeouts."""
    root = project()
    path = save(root / "r.json", build(1))
    one_line(
        capsys,
        2,
        "run",
        "--platform",
        "cpu",
        "--out",
        "o",
        "--history",
        path,
        "--durations-from",
        path,
        "models",
    )
    one_line(capsys, 2, "run", "--platform", "cpu", "--out", "o", "--timeouts-from-history", "models")
    assert not (root / "o").exists()


def test_a_history_of_another_suite_or_unreadable_is_a_note_not_a_failure(project, capsys) -> None:
    """``--history`` is guidance (CI restores what it can): another suite's report or a FIFO there is a
    note and the run goes on; its verdict is the tests' own (one fails: exit 1, never 0 nor 2)."""
    root = project()
    other = save(root / "h ☃" / "report.json", {**build(1), "suite": "other"})
    for given in (other, fifo(root / "pipe")):
        assert harness(["run", "--platform", "cpu", "--out", "o", "--history", given, "models"]) == 1
        assert "Traceback" not in capsys.readouterr().err
        assert "no history" in (root / "o" / "summary.md").read_text()


# --- harness merge ------------------------------------------------------------------------------------


def _shards(root: Path) -> list[str]:
    shards = []
    for index in range(2):
        made = build(1 + index, shard=f"{index}/2")
        made["tests"][0]["nodeid"] = f"tests/test_{index}.py::test_x"
        made["tests"][0]["file"] = f"tests/test_{index}.py"
        shards.append(save(root / f"s {index} ☃" / "report.json", made))
    return shards


def test_merge_hostile_inputs_are_one_line(tmp_path, capsys) -> None:
    first, second = _shards(tmp_path)
    pipe = fifo(tmp_path / "pipe")
    one_line(capsys, 2, "merge", first, first, "--out", str(tmp_path / "m"))  # a shard given twice
    one_line(capsys, 2, "merge", first, pipe, "--out", str(tmp_path / "m"))
    one_line(capsys, 2, "merge", first, second, "--out", pipe)
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)
    bad = json.loads(Path(second).read_text())
    for change in ({"shard": "1/2/3"}, {"shard": "1 of 2"}, {"shard": 1}, {"merged_from": [{}]}):
        broken = save(tmp_path / "broken.json", {**copy.deepcopy(bad), **change})
        one_line(capsys, 2, "merge", first, broken, "--out", str(tmp_path / "m"))
    assert not (tmp_path / "m").exists()


def test_merge_onto_one_of_its_inputs_loses_no_data(tmp_path, capsys) -> None:
    """``--out`` naming a shard's own run directory would clear it: refused in one line, the shard kept."""
    first, second = _shards(tmp_path)
    before = Path(first).read_text()
    code = harness(["merge", first, second, "--out", str(Path(first).parent)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert Path(first).read_text() == before


def test_merge_then_flaky_over_unicode_paths_counts_each_shard_once(tmp_path, capsys) -> None:
    first, second = _shards(tmp_path)
    out = tmp_path / "mer ged ☃"
    assert harness(["merge", first, second, "--out", str(out)]) == 0
    capsys.readouterr()
    err = one_line(capsys, 0, "flaky", str(out), first, second, str(out / "report.json"))
    assert "1 reports (3 given twice, counted once)" in err


# --- more careless inputs -------------------------------------------------------------------------------


def test_commands_given_nothing_are_one_usage_line(capsys) -> None:
    for argv in (["flaky"], ["merge", "--out", "x"], ["flaky", "--out"]):
        one_line(capsys, 2, *argv)


def test_flaky_out_onto_one_of_its_reports_loses_no_data(tmp_path, capsys) -> None:
    """Writing the list over a report it reads would destroy that build's record: refused in one line."""
    path = save(tmp_path / "r.json", build(1))
    before = Path(path).read_text()
    one_line(capsys, 2, "flaky", path, "--out", path)
    assert Path(path).read_text() == before
    link = tmp_path / "link.json"
    link.symlink_to(path)
    one_line(capsys, 2, "flaky", path, "--out", str(link))
    assert Path(path).read_text() == before


def test_flaky_out_through_a_symlink_to_a_fifo_or_directory_is_refused(tmp_path, capsys) -> None:
    good = save(tmp_path / "good.json", build(1))
    for name, made in (("pipe", lambda p: os.mkfifo(p)), ("dir", lambda p: p.mkdir())):
        real = tmp_path / name
        made(real)
        (tmp_path / f"to-{name}").symlink_to(real)
        one_line(capsys, 2, "flaky", good, "--out", str(tmp_path / f"to-{name}"))


def test_a_quarantine_list_past_its_bound_is_one_line(tmp_path, capsys) -> None:
    good = save(tmp_path / "good.json", build(1))
    huge = {"entries": [{"test_id": NODEID, "backend": "cpu"}] * 100_001}
    one_line(capsys, 2, "flaky", good, "--quarantine", save(tmp_path / "q.json", huge))


@pytest.mark.parametrize(
    "content",
    [
        '<testsuite><testcase classname="tests.test_t" name="test_x" time="nan"/></testsuite>',
        '<testsuite><testcase classname="tests.test_t" name="test_x" time="-4"/></testsuite>',
        '<testsuite><testcase classname="tests.test_t" name="test_x" time="1e999"/></testsuite>',
        '<!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
        '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]>'
        '<testsuite name="&d;"><testcase classname="x" name="y" time="1"/></testsuite>',
        "<testsuite><testcase",
        '{"tests/test_t.py::test_x": 1e400}',
        '{"tests/test_t.py::test_x": "1"}',
        '{"tests/test_t.py::test_x": true}',
    ],
)
def test_durations_files_of_hostile_values_are_one_line_or_a_run(project, capsys, content) -> None:
    """A JUnit file or ``.test_durations`` with NaN, negative, infinite or string seconds, an entity
    bomb, or cut short: refused in one line before any phase, or (a value the split cannot use, which it
    weighs by the median) a run whose verdict is its tests' (exit 1: one fails), never a traceback."""
    root = project()
    name = "d.xml" if content.startswith("<") else ".test_durations"
    path = save(root / name, content)
    code = harness(["run", "--platform", "cpu", "--out", "o", "--durations-from", path, "models"])
    err = capsys.readouterr().err
    assert code in (1, 2) and "Traceback" not in err, err
    if code == 2:
        assert err.count("\n") == 1 and name in err


@pytest.mark.parametrize(
    ("variable", "value"),
    [("HARNESS_RETRY", "nonsense"), ("HARNESS_RETRIES", "many"), ("HARNESS_QUARANTINE_FILE", "pipe")],
)
def test_a_bad_variable_is_one_line_before_any_phase(project, capsys, monkeypatch, variable, value) -> None:
    root = project()
    fifo(root / "pipe")
    monkeypatch.setenv(variable, value)
    one_line(capsys, 2, "run", "--platform", "cpu", "--out", "out", "models")
    assert not (root / "out").exists()


def test_flaky_rewrites_its_own_quarantine_file_in_place(tmp_path, capsys) -> None:
    """``--quarantine q --out q``, the detector's loop: read whole first, then replaced whole."""
    reports = [save(tmp_path / f"r{i}.json", build(i, "failed" if i % 2 else "passed")) for i in range(6)]
    listed = save(tmp_path / "q ☃.json", {"entries": [{"test_id": "tests/gone.py::t", "backend": "cpu"}]})
    one_line(capsys, 0, "flaky", *reports, "--quarantine", listed, "--out", listed)
    ids = [entry["test_id"] for entry in json.loads(Path(listed).read_text())["entries"]]
    assert ids == ["tests/gone.py::t", NODEID]  # kept: it has no runs, so it did not earn its way back


@pytest.mark.parametrize(
    "settings",
    [
        'quarantine = [{test = "a", until = 2026-12-31T10:00:00}]',
        'quarantine = [{test = "a", until = 20261231}]',
        'quarantine = [{test = "a", reason = 5}]',
        'quarantine = [{test = "  "}]',
    ],
)
def test_a_quarantine_table_of_the_wrong_kinds_is_one_line(project, capsys, settings) -> None:
    project(settings)
    err = one_line(capsys, 2, "run", "--platform", "cpu", "--out", "out", "models")
    assert "quarantine" in err


CRASH_AND_NETWORK = """
import os

def test_crash():
    os._exit(3)

def test_network():
    raise ConnectionError("hub unreachable")

def test_fine():
    pass
"""


@pytest.mark.parametrize("workers", ['"serial"', "1"])
def test_retrying_what_cannot_pass_still_fails_the_run(project, capsys, workers) -> None:
    """Retries asked for crashes and network failures, of a test whose process dies and one whose network
    never comes: each try fails, so the run fails (exit 1), serial or under xdist; nothing hangs."""
    root = project('retry = ["crashed", "network"]\nretries = 2')
    (root / "pyproject.toml").write_text(
        (root / "pyproject.toml").read_text().replace('workers = "serial"', f"workers = {workers}")
    )
    (root / "tests" / "test_t.py").write_text(CRASH_AND_NETWORK)
    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == 1
    assert "Traceback" not in capsys.readouterr().err
    report = json.loads((root / "out" / "report.json").read_text())
    outcomes = {t["nodeid"].split("::")[-1]: (t["outcome"], t.get("failure_class")) for t in report["tests"]}
    assert outcomes == {
        "test_crash": ("error", "crashed"),
        "test_network": ("failed", "network"),
        "test_fine": ("passed", None),
    }
