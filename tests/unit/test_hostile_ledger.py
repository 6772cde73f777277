"""A report always: a ledger line of the wrong type or out of range is one finding and is skipped, and every
report file of the run directory is still written (issue 35)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from harness.ledger.check import FIELDS
from tests.unit.report_runs import T0, Run
from tests.unit.test_ledger import _on_a_full_disk

GOOD_TEST = {
    "nodeid": "tests/t.py::test_b",
    "outcome": "passed",
    "setup_s": 0.1,
    "call_s": 0.2,
    "teardown_s": 0,
}
HOSTILE = {
    "a string where a duration belongs": ("test", 2.0, {**GOOD_TEST, "call_s": "soon"}),
    "a 400-digit integer time": ("test", None, {"t": int("9" * 400), **GOOD_TEST}),
    "devices a number": ("worker", 0.5, {"worker": "gw0", "devices": 3, "mask": None, "pid": 1}),
    "a negative duration": ("runner-started", 2.0, {"id": "gw0-1", "startup_s": -5.0}),
    "NaN where a duration belongs": ("test", 2.0, {**GOOD_TEST, "setup_s": float("nan")}),
    "an infinite time": ("test", None, {"t": float("inf"), **GOOD_TEST}),
    "a negative time": ("test", None, {"t": -1.0, **GOOD_TEST}),
    "an outcome pytest never gives": ("test", 2.0, {**GOOD_TEST, "outcome": {"passed": True}}),
    "a model that is a list": ("runner-start", 1.5, {"id": "gw0-9", "kind": "vllm", "model": ["m"]}),
    "memory that is text": ("memory", 2.0, {"used": {"cpu": "lots"}}),
    "a boolean byte count": ("memory", 2.0, {"used": {"cpu": True}}),
    "a pid that is a float": ("worker", 0.5, {"worker": "gw0", "devices": ["cpu"], "mask": None, "pid": 1.5}),
    "collected tests that are numbers": ("collected", 0.6, {"tests": [1, 2]}),
    "a finding without its message": ("finding", 2.0, {"type": "crash"}),
    "a crash whose test is null": ("crash", 2.0, {"test": None, "how": "killed"}),
    "a timeout that is a string": ("worker", 0.5, {"worker": "gw0", "devices": ["cpu"], "timeout": "3"}),
    "holders that are a string": ("runner-failed", 2.0, {"id": "gw0-1", "startup_s": 1, "holders": "x"}),
    "a session-end naming a number": ("session-end", 3.0, {"not_started": 7}),
}


def _hostile_line(event: str, t: float | None, fields: dict) -> str:
    line = {"event": event, **({} if t is None else {"t": T0 + t}), **fields}
    return json.dumps(line, allow_nan=True)  # NaN and Infinity as json.dumps writes them


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_ledger_line_is_one_finding_and_every_report_file_is_written(tmp_path, case):
    run = Run(tmp_path).phase("default", 0, 10)
    worker = run.worker("default")
    worker.runner("tests/t.py::test_a", 1, 3, 5)
    worker.test("tests/t.py::test_a", t=6)
    with worker.path.open("a") as handle:
        handle.write(_hostile_line(*HOSTILE[case]) + "\n")
    report = run.finalize()
    for name in ("report.json", "junit.xml", "summary.md", "timeline.svg", "report.html"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert json.loads((tmp_path / "report.json").read_text()) == report
    ET.parse(tmp_path / "junit.xml")
    [bad] = [f for f in report["findings"] if f["type"] == "bad-ledger-line"]
    assert bad["message"].startswith("gw0.jsonl line ") and "skipped" in bad["message"]
    assert [t["nodeid"] for t in report["tests"]] == ["tests/t.py::test_a"]  # the good lines all read
    assert [r["id"] for r in report["records"]] == ["gw0-1"]
    assert "bad-ledger-line" in (tmp_path / "summary.md").read_text()


REPORT_ON_A_FULL_DISK = """
import os, shutil, subprocess, sys
source, small = sys.argv[2], sys.argv[1]
shutil.copytree(source, small + "/run")
filler = os.open(small + "/filler", os.O_WRONLY | os.O_CREAT)
try:
    while True:  # the rest of the 64 KiB
        os.write(filler, b"x" * 512)
except OSError:
    os.close(filler)
sys.exit(subprocess.run([sys.executable, "-m", "harness", "report", small + "/run"]).returncode)
"""


def test_a_report_on_a_full_disk_is_one_line_not_a_traceback(tmp_path):
    """``harness report`` into a run directory on a full 64 KiB tmpfs: one ``harness: error:`` line naming
    the directory and the disk's error, exit 4 (the machine failed the run: not bad input, not failed
    tests), the old report files intact or absent."""
    run = Run(tmp_path / "source").phase("default", 0, 10)
    run.worker("default").test("tests/t.py::test_a", t=1)
    done = _on_a_full_disk(tmp_path, REPORT_ON_A_FULL_DISK, str(tmp_path / "small"), str(tmp_path / "source"))
    assert done.returncode == 4, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert (
        line.startswith("harness: error: ")
        and "report.json: cannot write it (No space left on device)" in line
    )


@pytest.mark.parametrize("event", sorted(FIELDS))
def test_an_event_with_only_its_name_and_time_never_breaks_a_report(tmp_path, event):
    """Every event kind the checker declares, with every field left out (a hostile or torn writer): the
    report files are all written; a line missing a required field is one finding."""
    run = Run(tmp_path).phase("default", 0, 10)
    worker = run.worker("default")
    worker.runner("tests/t.py::test_a", 1, 3, 5)
    worker.test("tests/t.py::test_a", t=6)
    with worker.path.open("a") as handle:
        handle.write(_hostile_line(event, 2.0, {}) + "\n")
    report = run.finalize()
    for name in ("report.json", "junit.xml", "summary.md", "timeline.svg", "report.html"):
        assert (tmp_path / name).stat().st_size > 0, name
    required = any(required for _, required, _ in FIELDS[event].values())
    bad = [f for f in report["findings"] if f["type"] == "bad-ledger-line"]
    assert len(bad) == (1 if required else 0)
