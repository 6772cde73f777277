"""Time-outs and worker crashes become findings in the ledger and the report (real pytest runs)."""

from __future__ import annotations

import json
import os

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


def test_a_worker_that_dies_mid_test_is_a_worker_crash_finding(pytester, monkeypatch, fake_gpus):
    fake_gpus([gpu(0, total=80 * GIB, used=GIB), gpu(1, total=80 * GIB, used=GIB)])
    suite = """
import os

def test_dies():
    os._exit(1)  # what pytest-timeout's thread method does to a hung worker
"""
    result, run_dir = run_suite(pytester, monkeypatch, {"test_crash": suite}, "-n", "2")
    result.assert_outcomes(failed=1)
    (finding,) = [f for f in ledger.read(run_dir / "ledger").findings if f["type"] == "worker-crash"]
    assert finding["test"] == "test_crash.py::test_dies"
    assert finding["message"].startswith("worker 'gw") and "crashed while running" in finding["message"]
    assert (run_dir / "ledger" / "default" / "controller.jsonl").exists()


def test_a_phase_past_its_timeout_is_a_finding_in_the_report(pytester, monkeypatch, fake_gpus):
    fake_gpus([gpu(0, total=80 * GIB, used=GIB)])
    result, run_dir = run_suite(pytester, monkeypatch, {"test_ok": "def test_ok():\n    pass\n"})
    meta = json.loads((run_dir / "phases.json").read_text())
    meta["phases"][0].update(timed_out=True, exit_code=2)  # as harness run records a phase it stopped
    (run_dir / "phases.json").write_text(json.dumps(meta))
    report = finalize(run_dir, env=dict(os.environ), publish=False)
    [finding] = [f for f in report["findings"] if f["type"] == "timeout"]
    assert finding["phase"] == "default" and "ran past its timeout" in finding["message"]
