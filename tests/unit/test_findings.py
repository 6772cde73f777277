"""Time-outs and worker crashes become findings in the ledger and the report (real pytest runs)."""

from __future__ import annotations

import json
import os

import pytest

from harness import ledger
from harness.report.finalize import finalize
from tests.fakes import gpu
from tests.unit.report_runs import GIB, run_suite

pytest_plugins = ["pytester"]


def test_a_test_pytest_timeout_fails_is_a_timeout_finding(pytester, monkeypatch, fake_gpus):
    fake_gpus([gpu(0, total=80 * GIB, used=GIB)])
    suite = """
import time

def test_hangs():
    time.sleep(30)

def test_after():
    pass
"""
    result, run_dir = run_suite(pytester, monkeypatch, {"test_slow": suite}, "--timeout", "1")
    result.assert_outcomes(passed=1, failed=1)
    (finding,) = ledger.read(run_dir / "ledger").findings
    assert (finding["type"], finding["test"]) == ("timeout", "test_slow.py::test_hangs")
    assert finding["message"] == "Failed: Timeout (>1.0s) from pytest-timeout."


@pytest.mark.parametrize("dist", ["loadscope", "loadfile"])
def test_a_worker_that_dies_mid_test_is_an_error_run_once_and_the_file_goes_on(
    pytester, monkeypatch, fake_gpus, dist
):
    fake_gpus([gpu(0, total=80 * GIB, used=GIB), gpu(1, total=80 * GIB, used=GIB)])
    suite = """
import os, pathlib

def test_before():
    pass

def test_dies():
    with open(pathlib.Path(__file__).parent / "runs.txt", "a") as runs:
        runs.write("x")
    os._exit(7)  # what pytest-timeout's thread method does to a hung worker (with status 1)

def test_after():
    pass
"""
    result, run_dir = run_suite(pytester, monkeypatch, {"test_crash": suite}, "-n", "2", "--dist", dist)
    result.assert_outcomes(passed=2, failed=1)
    assert (pytester.path / "runs.txt").read_text() == "x"  # not re-run on the replacement worker
    merged = ledger.read(run_dir / "ledger")
    (finding,) = [f for f in merged.findings if f["type"] == "crash"]
    assert finding["test"] == "test_crash.py::test_dies"
    assert finding["message"].startswith("worker gw") and finding["message"].endswith(
        "exited with status 7 while running test_crash.py::test_dies"
    )
    outcomes = {t["nodeid"].split("::")[1]: t["outcome"] for t in merged.tests}
    assert outcomes == {"test_before": "passed", "test_dies": "error", "test_after": "passed"}
    assert set(merged.collected) == {f"test_crash.py::{name}" for name in outcomes}


def test_a_phase_past_its_timeout_is_a_finding_in_the_report(pytester, monkeypatch, fake_gpus):
    fake_gpus([gpu(0, total=80 * GIB, used=GIB)])
    result, run_dir = run_suite(pytester, monkeypatch, {"test_ok": "def test_ok():\n    pass\n"})
    meta = json.loads((run_dir / "phases.json").read_text())
    meta["phases"][0].update(timed_out=True, exit_code=2)  # as harness run records a phase it stopped
    (run_dir / "phases.json").write_text(json.dumps(meta))
    report = finalize(run_dir, env=dict(os.environ), publish=False)
    [finding] = [f for f in report["findings"] if f["type"] == "timeout"]
    assert finding["phase"] == "default" and "ran past its timeout" in finding["message"]
