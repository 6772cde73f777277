"""Issue 58's seams, one fact each: a shard is the one ``Shard`` wherever merge reads it; a quarantined
test's crash is quarantined in every output; ``harness flaky`` counts a build once whether it comes merged,
as its shards, or both; failures first moves whole engine groups at every scope the split knows."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import split
from harness.report.union import merge
from tests.unit.report_runs import Run
from tests.unit.test_merge import shard_reports

pytest_plugins = ["pytester"]

# --- the one Shard: merge reads a report's shard as Shard.parse reads it, never as a second formatter ---

SPELLED = st.sampled_from(["{i}/{n}", " {i}/{n}", "{i}/{n} ", "0{i}/{n}", "{i}/0{n}", "00{i}/{n}"])


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 4), spelling=SPELLED, data=st.data())
def test_a_shard_spelled_any_way_shard_parse_reads_merges_as_that_shard(count, spelling, data):
    """A report's ``shard`` as any spelling ``Shard.parse`` accepts: merge accepts the shards and agrees
    with their recorded splits (old code compared its own ``"i/N"`` string with the spelling as written,
    and refused ``" 0/2"`` as having "recorded the split of 0/2")."""
    selection = [f"t/test_{i}.py::test_x" for i in range(6)]
    reports = shard_reports(selection, count)
    for index, report in enumerate(reports):
        if data.draw(st.booleans()):
            report["shard"] = spelling.format(i=index, n=count)
    merged = merge(copy.deepcopy(reports), [f"r{i}" for i in range(count)])
    assert merged["accounting"]["proven"] is True
    assert merged["shards"] == [str(split.Shard(i, count)) for i in range(count)]


# --- a quarantined test's crash: quarantined in every output, serial and under xdist ---


def _outputs(run_dir: Path) -> tuple[dict, str, dict[str, str]]:
    """report.json's tests' outcomes and classes, summary.md, and each JUnit case's verdict tag."""
    report = json.loads((run_dir / "report.json").read_text())
    cases = {}
    for case in ET.parse(run_dir / "junit.xml").getroot().iter("testcase"):
        tags = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        cases[case.get("name", "")] = tags[0] if tags else "passed"
    tests = {t["nodeid"].split("::")[-1]: (t["outcome"], t.get("failure_class")) for t in report["tests"]}
    return tests, (run_dir / "summary.md").read_text(), cases


def _said(summary_md: str, name: str) -> str:
    """Where summary.md names the test: the quarantined line, the failure table, or nowhere."""
    for line in summary_md.splitlines():
        if name in line and "quarantined tests failed without failing the run" in line:
            return "quarantined"
        if name in line and line.startswith("| `crashed` |"):
            return "gating"
    return "nowhere"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    crashes=st.lists(st.booleans(), max_size=4),
    others=st.lists(st.sampled_from(["passed", "failed", "skipped"]), max_size=3),
)
def test_every_output_reports_a_crash_as_its_crash_event_says(tmp_path_factory, crashes, others) -> None:
    """Crashes (the xdist controller's or ``harness run``'s resume's ``crash`` event, quarantined or not)
    beside other tests: report.json, JUnit and summary.md agree, a quarantined crash is skipped with its
    class and named as quarantined, never as gating; any other crash is an error named as gating."""
    run = Run(tmp_path_factory.mktemp("run")).phase("p", 0.0, 10.0)
    gw0, writer = run.worker("p", "gw0"), run.worker("p", "controller")
    for index, outcome in enumerate(others):
        gw0.test(f"tests/test_o.py::test_other{index}", outcome, t=1.0 + index)
    for index, held in enumerate(crashes):
        nodeid = f"tests/test_c.py::test_crash{index}"
        gw0.write("test-start", 5.0 + index, nodeid=nodeid, worker="gw0", phase="p")
        gw0.write("worker", 5.5 + index, worker="gw0", devices=["cpu"], mask="cpu", pid=7, phase="p")
        writer.write(
            "crash", 6.0 + index, test=nodeid, worker="gw0", how="killed by SIGKILL", quarantined=held
        )
    run.finalize()
    tests, summary_md, cases = _outputs(run.root)
    for index, held in enumerate(crashes):
        name = f"test_crash{index}"
        assert tests[name] == ("skipped" if held else "error", "crashed")
        assert cases[name] == ("skipped" if held else "error")
        assert _said(summary_md, name) == ("quarantined" if held else "gating")
    report = json.loads((run.root / "report.json").read_text())
    counted = report["phases"][0]["outcomes"]
    assert counted.get("error", 0) == sum(not held for held in crashes)


CRASHING = """
import os

def test_crash():
    os._exit(3)

def test_fine():
    pass
"""

PROJECT = """
[tool.harness]
{quarantine}
[tool.harness.suites.models]
paths = ["tests"]

[[tool.harness.suites.models.phases]]
name = "p"
workers = {workers}
"""


@pytest.mark.parametrize("workers", ['"serial"', "1"])
@pytest.mark.parametrize("held", [True, False])
def test_a_quarantined_crash_is_quarantined_in_every_output_serial_and_under_xdist(
    pytester: pytest.Pytester, fake_gpus, workers: str, held: bool
) -> None:
    """Old code: the run passed, but report.json said ``error``, summary.md named the crash among the
    failures that gate, and (serial) JUnit wrote it as an error. Not quarantined, it gates everywhere."""
    fake_gpus([], vendor="nvidia")
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_c.py").write_text(CRASHING)
    listed = 'quarantine = ["tests/test_c.py::test_crash"]' if held else ""
    (pytester.path / "pyproject.toml").write_text(PROJECT.format(quarantine=listed, workers=workers))
    from harness.cli import main as harness

    assert harness(["run", "--platform", "cpu", "--out", "out", "models"]) == (0 if held else 1)
    tests, summary_md, cases = _outputs(pytester.path / "out")
    assert tests == {
        "test_crash": ("skipped" if held else "error", "crashed"),
        "test_fine": ("passed", None),
    }
    assert cases == {"test_crash": "skipped" if held else "error", "test_fine": "passed"}
    assert _said(summary_md, "test_crash") == ("quarantined" if held else "gating")
