"""harness compare: figures per suite, phase and file, the formats, the regression gates, bad inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.report.compare import change
from tests.unit.report_runs import Run

ROOT = Path(__file__).resolve().parents[2]


def _harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=ROOT, check=False
    )


def _pooling(root: Path, shipped: bool, wall: float) -> Path:
    """The pooling suite before (every test its own engine) and after (one engine per file) the rework."""
    run = Run(root).phase("default", 0, wall).phase("multi", wall + 1, 20)
    worker = run.worker("default")
    t = 0.0
    files = {"tests/p/test_embed.py": 4, "tests/p/test_rerank.py": 2}
    files["tests/p/test_new.py" if shipped else "tests/p/test_old.py"] = 1
    for file, tests in files.items():
        for n in range(tests):
            if n == 0 or not shipped:
                worker.runner(f"{file}::test_{n}", t, 30, t + 31)
            worker.test(f"{file}::test_{n}", t=t + 32, setup_s=30 if n == 0 or not shipped else 0, call_s=1)
            t += 33
    hf = run.worker("default", "gw1")
    for n in range(1 if shipped else 3):
        hf.runner(f"tests/p/test_hf.py::test_{n}", n * 10, 5, n * 10 + 6, kind="hf", model="st")
        hf.test(
            f"tests/p/test_hf.py::test_{n}",
            outcome="passed" if shipped or n else "failed",
            t=n * 10 + 6,
            call_s=6,
        )
    run.worker("multi").test("tests/p/test_tp.py::test_tp", t=wall + 5, call_s=10)
    run.finalize()
    return root


@pytest.fixture
def reports(tmp_path):
    return _pooling(tmp_path / "naive", False, 300.0), _pooling(tmp_path / "shipped", True, 150.0)


def test_text_shows_the_drop_per_suite_phase_and_file(reports):
    naive, shipped = reports
    done = _harness("compare", str(naive), str(shipped / "report.json"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "vLLM",
        "starts",
        "HF",
        "starts",
        "reused",
        "saved",
        "wall",
        "passed",
        "failed",
    ]
    rows = {
        line.split("  ")[0]: [cell for cell in line.split("  ")[1:] if cell.strip()] for line in lines[1:]
    }
    cells = {name: [c.strip() for c in row] for name, row in rows.items()}
    assert cells["suite pooling"] == [
        "7 → 3 (−4)",
        "3 → 1 (−2)",
        "0 → 0 (±0)",
        "0.0s → 0.0s (±0.0s)",
        "320s → 170s (−150s, −47%)",
        "10 → 9 (−1)",
        "1 → 0 (−1)",
    ]
    assert cells["phase default"][:5:2] == ["7 → 3 (−4)", "0 → 0 (±0)", "300s → 150s (−150s, −50%)"]
    assert cells["phase multi"] == [
        "0 → 0 (±0)",
        "0 → 0 (±0)",
        "0 → 0 (±0)",
        "0.0s → 0.0s (±0.0s)",
        "20.0s → 20.0s (±0.0s, ±0%)",
        "1 → 1 (±0)",
        "0 → 0 (±0)",
    ]
    assert cells["file tests/p/test_embed.py"][0] == "4 → 1 (−3)"
    assert cells["file tests/p/test_embed.py"][4] == "124s → 34s (−90s, −73%)"
    assert cells["file tests/p/test_old.py (removed)"][:2] == ["1 → —", "0 → —"]
    assert cells["file tests/p/test_new.py (added)"][0] == "— → 1"
    assert done.stderr == ""


def test_markdown_and_json(reports):
    naive, shipped = reports
    md = _harness("compare", str(naive), str(shipped), "--format", "md")
    assert md.returncode == 0
    lines = md.stdout.splitlines()
    assert lines[:2] == [
        "|  | vLLM starts | HF starts | reused | saved | wall | passed | failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    assert "| suite pooling | 7 → 3 (−4) | 3 → 1 (−2) |" in md.stdout
    as_json = json.loads(_harness("compare", str(naive), str(shipped), "--format", "json").stdout)
    assert as_json["suite"]["metrics"]["vllm_starts"] == [7, 3]
    files = {f["name"]: f for f in as_json["files"]}
    assert files["tests/p/test_new.py"]["status"] == "added"
    assert files["tests/p/test_old.py"]["metrics"]["passed"] == [1, None]
    assert [p["name"] for p in as_json["phases"]] == ["default", "multi"]


def test_fail_on_regression_starts_both_ways(reports):
    naive, shipped = reports
    better = _harness("compare", str(naive), str(shipped), "--fail-on-regression", "starts")
    assert (better.returncode, better.stderr) == (0, "")
    worse = _harness("compare", str(shipped), str(naive), "--fail-on-regression", "starts")
    assert worse.returncode == 1
    assert worse.stderr == (  # each file whose starts grew, named (a file new in AFTER: "— → n")
        "harness: regression: runner starts rose: 4 → 10 (+6); tests/p/test_embed.py: vLLM starts 1 → 4; "
        "tests/p/test_hf.py: HF starts 1 → 3; tests/p/test_rerank.py: vLLM starts 1 → 2; "
        "tests/p/test_old.py: vLLM starts — → 1\n"
    )


def test_fail_on_regression_wall_percent_both_ways(tmp_path):
    before = _pooling(tmp_path / "before", True, 100.0)
    slower = _pooling(tmp_path / "slower", True, 115.0)  # +15 s over 120 s: 12.5 %
    within = _harness("compare", str(before), str(slower), "--fail-on-regression", "wall:15%")
    assert (within.returncode, within.stderr) == (0, "")
    beyond = _harness(
        "compare", str(before), str(slower), "--fail-on-regression", "wall:10%", "--format", "json"
    )
    assert beyond.returncode == 1
    assert beyond.stderr == "harness: regression: wall time rose more than 10%: 120s → 135s (+15s, +12%)\n"
    json.loads(beyond.stdout)  # the gate's line goes to stderr and leaves the JSON intact
    faster = _harness("compare", str(slower), str(before), "--fail-on-regression", "wall")
    assert faster.returncode == 0


def _write(path: Path, content) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


BAD = {
    "missing file": (lambda d: d / "nope.json", "{}: no such report file"),
    "directory without report": (
        lambda d: _write(d / "phases.json", "{}").parent,
        "{} is a directory without report.json (run 'harness report {}')",
    ),
    "empty file": (lambda d: _write(d / "r.json", ""), "{}: empty report file"),
    "truncated JSON": (
        lambda d: _write(d / "r.json", '{"version": 1, "suite": "pooling", "phases": [{"na'),
        "{}: truncated report (JSON ends early, after 50 bytes)",
    ),
    "not JSON": (
        lambda d: _write(d / "r.xml", "<testsuites/>"),
        "{}: not a JSON report (Expecting value at line 1 column 1)",
    ),
    "not UTF-8": (lambda d: _write(d / "r.json", b"\x89PNG\r\n"), "{}: not a JSON report (not UTF-8 text)"),
    "not an object": (
        lambda d: _write(d / "r.json", '"report"'),
        "{}: not a report (JSON str, expected an object)",
    ),
    "other version": (
        lambda d: _write(d / "r.json", '{"version": 2, "suite": "pooling"}'),
        "{}: report format version 2, this harness reads 1",
    ),
    "missing fields": (
        lambda d: _write(
            d / "r.json",
            '{"version": 1, "generated": 1, "suite": "pooling", "platform": {"name": "cpu", "reason": null}, '
            '"phases": [], "tests": []}',
        ),
        "{}: report has no 'records' field",
    ),
}


@pytest.mark.parametrize("case", BAD)
@pytest.mark.parametrize("side", ["before", "after"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, reports, case, side):
    make, message = BAD[case]
    bad = make(tmp_path / "bad")
    good = str(reports[0])
    args = (str(bad), good) if side == "before" else (good, str(bad))
    done = _harness("compare", *args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == f"harness: error: {message.format(bad, bad)}\n"


def test_a_bad_gate_is_one_line_and_exit_2(reports):
    done = _harness("compare", str(reports[0]), str(reports[1]), "--fail-on-regression", "speed")
    assert (done.returncode, done.stdout) == (2, "")
    assert (
        done.stderr == "harness: error: --fail-on-regression 'speed': expected 'starts', 'wall' or 'wall:N%' "
        "(N from 0 to 1000000000)\n"
    )


def test_a_wall_gate_without_wall_times_is_an_error(tmp_path, reports):
    killed = Run(tmp_path / "killed")
    killed.worker("default").test("tests/t.py::test_a")
    killed.finalize()
    done = _harness("compare", str(reports[0]), str(tmp_path / "killed"), "--fail-on-regression", "wall:5%")
    assert done.returncode == 2
    assert (
        done.stderr.splitlines()[-1]
        == "harness: error: --fail-on-regression wall: a report has no (finite) phase wall times"
    )


def test_change_formats():
    assert change(64, 18) == "64 → 18 (−46)"
    assert change(3, 5) == "3 → 5 (+2)"
    assert change(None, 5) == "— → 5"
    assert change(None, None) == "—"
    assert change(0.0, 4.0, seconds=True) == "0.0s → 4.0s (+4.0s)"
    assert change(1, 1) == "1 → 1 (±0)"


def test_reuse_shows_as_starts_avoided_and_seconds_saved(tmp_path, reports):
    naive, _ = reports
    run = Run(tmp_path / "reused").phase("default", 0, 160.0)
    worker = run.worker("default")
    first = worker.runner("tests/p/test_embed.py::test_0", 0, 30, 31)
    for n in range(1, 4):
        worker.reused(
            first, f"tests/p/test_embed.py::test_{n}", 40 + n, fingerprint="a1b2c3d4e5f6", saved_s=30
        )
    run.finalize()
    done = _harness("compare", str(naive), str(tmp_path / "reused"), "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["suite"]["metrics"]["reused"] == [0, 3]
    assert result["suite"]["metrics"]["saved_s"] == [0, 90.0]
    files = {f["name"]: f["metrics"] for f in result["files"]}
    assert files["tests/p/test_embed.py"]["vllm_starts"] == [4, 1]
    assert files["tests/p/test_embed.py"]["reused"] == [0, 3]
    text = _harness("compare", str(naive), str(tmp_path / "reused")).stdout
    assert "0 → 3 (+3)" in text and "0.0s → 90.0s (+90.0s)" in text
