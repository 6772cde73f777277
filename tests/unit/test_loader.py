"""The one loader of read-back files (``harness.report.store``), issue 50 item 3.

Every file the harness reads back (a report.json, a shard's, a baseline, durations, phases.json, the
configurations file) is read bounded and checked against the schema's types once: a hostile file is one line
naming the file and the field (exit 2 from the CLI), and a report the loader accepts never crashes
``compare``, ``merge``, ``--baseline`` or the summary (reports drawn from the schema itself).
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
import typing
from pathlib import Path
from typing import Annotated, Any

import markdown_it
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main as harness
from harness.config.validate import Bounds
from harness.errors import HarnessError, ReportError
from harness.report import baseline as before_after
from harness.report import summary
from harness.report.compare import Gate, compare, render
from harness.report.previous import durations as previous_durations
from harness.report.previous import read as previous_read
from harness.report.schema import Report
from harness.report.store import configurations, load, load_phases, recorded
from harness.report.union import merge
from harness.split import junit_key
from tests.unit.schema_strategies import leaves, named, of, put

RUNS = Path(__file__).parents[2] / "docs" / "runs"
REAL = json.loads((RUNS / "pooling-cpu.json").read_text())
REPORTS = of(Report)
SAFE = HarnessError  # every refusal the harness makes is one of these: one line, exit 2


def _write(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value, allow_nan=True))
    return path


def _refused(path: Path) -> str:
    with pytest.raises(ReportError) as caught:
        load(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path)), message
    return message


# --- what the loader accepts ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in RUNS.glob("*.json")))
def test_every_real_report_in_the_docs_is_accepted_whole(name):
    report = load(RUNS / name)
    original = json.loads((RUNS / name).read_text())
    assert {k: v for k, v in report.items() if k in original} == original


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(report=REPORTS)
def test_a_report_drawn_from_the_schema_is_accepted_as_it_is(tmp_path_factory, report):
    path = _write(tmp_path_factory.mktemp("r") / "report.json", report)
    loaded = load(path)
    assert {k: v for k, v in loaded.items() if k in report} == report


# --- nothing it accepted can crash what reads it -----------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=REPORTS, after=REPORTS, gate=st.sampled_from(["starts", "wall", "wall:10%"]))
def test_compare_merge_baseline_and_summary_never_crash_on_an_accepted_report(
    tmp_path_factory, before, after, gate
):
    where = tmp_path_factory.mktemp("r")
    before, after = load(_write(where / "before.json", before)), load(_write(where / "after.json", after))
    result = compare(before, after)
    for fmt in ("text", "md", "json"):
        render(result, fmt)
    try:
        Gate.parse(gate).regression(result)
    except SAFE:
        pass
    try:
        merged = merge([before, after], ["before", "after"])
    except SAFE:
        merged = after
    json.dumps(merged, allow_nan=False)  # what harness merge writes
    for path in (where / "before.json", where / "after.json"):  # the durations and history it gives
        history = previous_read(path)
        assert previous_durations(path).configurations == history.configurations
        [history.groups.unit(test["nodeid"]) for test in load(path)["tests"]]
    opening = before_after.lines(merged, str(where / "before.json"))
    text = summary.render(merged, opening=opening)
    text.encode("utf-8")
    _no_raw_html(text)


def _no_raw_html(text: str) -> None:
    """Rendered as GitHub and Buildkite render Markdown (HTML passed through): no tag from the data."""
    rendered = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    assert "<img" not in rendered and "<script" not in rendered, rendered[:2000]


HTML = "x\n<img src=x onerror=alert(1)>|`y`\r<script>z</script>"


def test_no_name_in_a_report_reaches_the_summary_as_html(tmp_path):
    """Every string of a real report (file names, phase names, models, kinds, workers, findings, advice)
    set to markup with line breaks, pipes and backticks: summary.md and its before → after opening
    render none of it as HTML (the old summary passed a file name's line break and tags through)."""
    report = copy.deepcopy(REAL)
    report["advice"] = [
        {
            "kind": "vllm",
            "model": "m",
            "fingerprint": "f",
            "phase": "p",
            "worker": "gw0",
            "file": "t.py",
            "starts": 2,
            "runners": ["a", "b"],
            "tests": ["t.py::a", None],
            "scope": "class",
            "class": "t.py::K",
            "seconds_saved": 1.0,
            "blocked": [],
            "warning": None,
        }
    ]
    free = [steps for steps, _, kind in leaves(report, Report) if kind is str or _base(kind) is str]
    for steps in free:
        put(report, steps, HTML)
    report["starts"]["by_file"] = {HTML: report["starts"]["total"]}
    report["files"] = {HTML: {"tests": 1, "outcomes": {"passed": 1}, "wall_s": 1.0}}
    path = _write(tmp_path / "report.json", report)
    loaded = load(path)
    base = copy.deepcopy(REAL)
    base_path = _write(tmp_path / "base.json", base)
    _no_raw_html(summary.render(loaded, opening=before_after.lines(loaded, str(base_path))))
    _no_raw_html(render(compare(load(base_path), loaded), "md"))
    _no_raw_html("\n".join(before_after.lines(loaded, str(tmp_path / HTML.replace("/", "_")))))


# --- hostile contents: each field, each kind of wrong -----------------------------------------------

LEAVES = list(leaves(REAL, Report))


def _base(kind: Any) -> Any:
    return typing.get_args(kind)[0] if typing.get_origin(kind) is Annotated else kind


def _wrong_type(kind: Any) -> Any:
    return {str: 7, int: "7", float: "7.0", bool: "yes"}.get(_base(kind), [["x"]])


def test_a_field_of_the_wrong_type_anywhere_is_one_line_naming_it(tmp_path):
    """A family: every typed leaf of a real report, in turn, of another type (a count as text, a name as
    a number, a flag as text, ...)."""
    assert len(LEAVES) > 300
    for steps, _, kind in LEAVES:
        bad = put(copy.deepcopy(REAL), steps, _wrong_type(kind))
        message = _refused(_write(tmp_path / "report.json", bad))
        assert named(steps) in message, (named(steps), message)


BOUNDED = [(steps, kind) for steps, _, kind in LEAVES if typing.get_origin(kind) is Annotated]


@pytest.mark.parametrize("bad", [-1, -0.5, -(2**62), 1e300, "NaN", "Infinity", "-Infinity", 1e400])
def test_a_number_out_of_its_range_anywhere_is_one_line_naming_it(tmp_path, bad):
    """Every bounded number of a real report (counts, bytes, times, seconds) negative, past its range, NaN
    or infinite: one line (the old loader summed negative counts as if they were real)."""
    assert len(BOUNDED) > 100
    for steps, kind in BOUNDED:
        bounds = next(m for m in kind.__metadata__ if isinstance(m, Bounds))
        if isinstance(bad, int | float) and bounds.hold(bad):
            continue  # in range here (an exit code may be negative)
        text = json.dumps(put(copy.deepcopy(REAL), steps, "@@"))
        literal = str(bad) if not isinstance(bad, float) or math.isfinite(bad) else "1e400"
        path = tmp_path / "report.json"
        path.write_text(text.replace('"@@"', literal if bad != 1e400 else "1e400"))
        message = _refused(path)
        assert named(steps) in message or "not a report" in message, message


def test_negative_counts_are_not_summed_by_compare_or_merge(tmp_path):
    """The issue's own case, through the CLI: a baseline whose file tallies and starts are negative."""
    bad = copy.deepcopy(REAL)
    for tally in bad["files"].values():
        tally["tests"] = -5
    _write(tmp_path / "base.json", bad)
    _write(tmp_path / "good.json", REAL)
    for argv in (
        ["compare", str(tmp_path / "base.json"), str(tmp_path / "good.json")],
        ["merge", str(tmp_path / "base.json"), "--out", str(tmp_path / "out")],
    ):
        _one_line_exit_2(argv)


@pytest.mark.parametrize("depth", [40, 5000, 200_000])
def test_deep_nesting_is_one_line(tmp_path, depth):
    bad = copy.deepcopy(REAL)
    bad["records"][0]["config"] = "@@"
    text = json.dumps(bad).replace('"@@"', "[" * depth + "]" * depth)
    (tmp_path / "report.json").write_text(text)
    assert "nested" in _refused(tmp_path / "report.json")


@pytest.mark.parametrize("surrogate", ['"\\ud800"', '"a\\udfffb"'])
def test_text_that_no_file_can_hold_is_one_line(tmp_path, surrogate):
    """A lone surrogate (JSON can escape it; UTF-8 cannot hold it): summary.md could not be written."""
    bad = copy.deepcopy(REAL)
    bad["records"][0]["config"] = {"x": "@@"}
    (tmp_path / "report.json").write_text(json.dumps(bad).replace('"@@"', surrogate))
    assert "surrogate" in _refused(tmp_path / "report.json")


# --- hostile files: what is not a regular file, and what is too big ----------------------------------


def _one_line_exit_2(argv: list[str], capsys=None) -> str:
    import io
    from contextlib import redirect_stderr

    err = io.StringIO()
    with redirect_stderr(err):
        code = harness(argv)
    text = err.getvalue()
    assert code == 2, text
    assert text.count("\n") == 1 and text.startswith("harness: error: "), text
    return text


def _hostile(kind: str, tmp_path: Path) -> Path:
    path = tmp_path / f"hostile-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        return Path("/dev/zero")
    elif kind == "symlink to dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        (path / "sub").mkdir(parents=True)
    elif kind == "dangling symlink":
        path.symlink_to(tmp_path / "nowhere")
    return path


FILES = ["fifo", "dev-zero", "symlink to dev-zero", "directory", "dangling symlink"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", FILES)
def test_a_file_that_is_not_a_regular_one_is_refused_at_once_by_every_reader(tmp_path, kind):
    """compare, merge, merge's baseline, durations (``recorded``), phases.json and the configurations file:
    a FIFO without a writer must not block, /dev/zero must not be read to exhaustion."""
    bad = _hostile(kind, tmp_path)
    good = _write(tmp_path / "good.json", REAL)
    _one_line_exit_2(["compare", str(bad), str(good)])
    _one_line_exit_2(["compare", str(good), str(bad)])
    _one_line_exit_2(["merge", str(bad), "--out", str(tmp_path / "out")])
    lines = before_after.lines(load(good), str(bad))
    assert len(lines) == 4 and "cannot be compared" in lines[2], lines
    for read in (recorded, load_phases, configurations):
        with pytest.raises(ReportError):
            read(bad)


@pytest.mark.parametrize("reader", ["report", "durations", "configurations"])
def test_a_file_past_the_size_bound_is_one_line(tmp_path, monkeypatch, reader):
    monkeypatch.setattr("harness.report.store.MAX_BYTES", 1024)
    path = _write(tmp_path / "big.json", {"x" * 2048: 1.0} if reader != "report" else REAL)
    read = {"report": load, "durations": recorded, "configurations": configurations}[reader]
    with pytest.raises(ReportError, match="larger than"):
        read(path)


# --- durations and configurations through the same loader --------------------------------------------


def test_durations_from_a_report_junit_and_pytest_splits_file(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "report.json", REAL)
    seconds, source, report = recorded(run)
    first = REAL["tests"][0]
    assert source == "report" and report is not None
    assert seconds[first["nodeid"]] == pytest.approx(first["setup_s"] + first["call_s"] + first["teardown_s"])
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite><testcase classname="t.test_a.TestK" name="test_y[1]" time="2.0"/>'
        "</testsuite></testsuites>"
    )
    seconds, source, _ = recorded(junit)
    assert source == "junit" and seconds[junit_key("t/test_a.py::TestK::test_y[1]")] == 2.0
    durations = _write(tmp_path / ".test_durations", {"t/test_a.py::test_x": 4})
    assert recorded(durations)[:2] == ({"t/test_a.py::test_x": 4.0}, "test_durations")


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[1, 2]",
        '{"t.py::x": "soon"}',
        '{"t.py::x": 1e400}',
        '{"t.py::x": -1}',
        '{"t.py::x": NaN}',
        '{"tests": [{"call_s": 1}]}',  # half a report: neither a report nor a durations file
        '{"version": 1, "tests": []}',
        '<testsuite><testcase name="x" time="abc"/></testsuite>',
        '<testsuite><testcase name="x" time="-3"/></testsuite>',
        '<testsuite><testcase name="x" time="nan"/></testsuite>',
        "<testsuite><unclosed></testsuite>",
    ],
)
def test_a_bad_durations_file_is_one_line(tmp_path, content):
    path = tmp_path / "durations"
    path.write_text(content)
    with pytest.raises(HarnessError) as raised:
        recorded(path)
    assert "\n" not in str(raised.value) and str(path) in str(raised.value)


@pytest.mark.parametrize("content", ['{"t.py::a": 3}', '["t.py::a"]', '{"t.py::a": null}', ""])
def test_a_bad_configurations_file_is_one_line(tmp_path, content):
    path = tmp_path / "configurations.json"
    path.write_text(content)
    with pytest.raises(ReportError) as raised:
        configurations(path)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "phases",
    [{"phases": "x"}, {"phases": [{"name": ""}]}, {"phases": [{"name": "p", "wall_s": -1}]}, {"suite": 3}],
)
def test_a_bad_phases_file_is_one_line(tmp_path, phases):
    path = _write(tmp_path / "phases.json", phases)
    with pytest.raises(ReportError, match="phases file"):
        load_phases(path)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))


# --- the case end to end: harness run --baseline with a hostile baseline ---------------------

BASELINES = {
    "a count that is text": lambda r: r["starts"]["total"].update(starts="3"),
    "a negative count": lambda r: next(iter(r["files"].values())).update(tests=-4),
    "a file tally that is a list": lambda r: r["starts"]["by_file"].update({"t.py": []}),
    "a record's kind that is a number": lambda r: r["records"][0].update(kind=3),
    "a NaN wall": lambda r: r["phases"][0].update(wall_s=math.nan),
}


@pytest.mark.parametrize("case", sorted(BASELINES))
def test_run_with_a_hostile_baseline_passes_writes_its_report_and_says_why_in_one_line(
    tmp_path, monkeypatch, fake_gpus, case
):
    """The old harness ran every test, then died comparing (a traceback, exit 4, no report)."""
    fake_gpus([], vendor="nvidia")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    (tmp_path / "pyproject.toml").write_text('[tool.harness.suites.models]\npaths = ["tests"]\n')
    baseline = copy.deepcopy(REAL)
    BASELINES[case](baseline)
    _write(tmp_path / "base.json", {**baseline, "suite": "models"})
    assert harness(["run", "--platform", "cpu", "--out", "out", "--baseline", "base.json", "models"]) == 0
    report = load(tmp_path / "out")
    assert report["phases"] and (tmp_path / "out" / "summary.md").is_file()
    said = (tmp_path / "out" / "summary.md").read_text()
    assert "the baseline base.json cannot be compared: base.json: " in said, said[:2000]
