"""A gate that cannot compare a build with itself (issue 50, item 4): an ``--out`` at, inside or holding the
baseline is refused before anything is written, and a baseline of this build's own commit and run is one line
in the summary, or exit 2 under a gate (the old gate passed a regression when ``--out`` was the baseline)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from harness.cli import main as harness

RUNS = Path(__file__).parents[2] / "docs" / "runs"
BEFORE = json.loads((RUNS / "pooling-naive-cpu.json").read_text())  # 10 vLLM starts
AFTER = json.loads((RUNS / "pooling-cpu.json").read_text())  # 3: the reverse is a regression


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = harness(argv)
    return code, out.getvalue(), err.getvalue()


def _run_dir(path: Path, report: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "report.json").write_text(json.dumps({**report, "suite": "pooling"}))
    return path


# (--out, --baseline) relative to the work directory; the baseline's run directory is "base"
OVERLAPS = {
    "out is the baseline": ("base", "base"),
    "out is the baseline, spelled with ./ and a slash": ("./base/", "base"),
    "out is the baseline's report.json's directory": ("base", "base/report.json"),
    "out inside a folder of shard run directories": ("shards/merged", "shards"),
    "the baseline inside out": ("work", "work/base"),
    "out through a symlink to the baseline": ("link", "base"),
}


@pytest.mark.parametrize("case", sorted(OVERLAPS))
def test_merge_refuses_an_out_that_overlaps_the_baseline_and_writes_nothing(tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    out, baseline = OVERLAPS[case]
    shard = _run_dir(tmp_path / "shard", BEFORE)  # this build starts more than the baseline did
    for where in ("base", "shards/a", "work/base"):
        _run_dir(tmp_path / where, AFTER)
    (tmp_path / "link").symlink_to(tmp_path / "base")
    kept = {p: p.read_bytes() for p in tmp_path.rglob("report.json")}
    code, _, err = _cli(
        ["merge", str(shard), "--out", out, "--baseline", baseline, "--fail-on-regression", "starts"]
    )
    assert code == 2 and err.count("\n") == 1 and "compared with itself" in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob("report.json")} == kept


def test_a_separate_out_compares_and_the_gate_trips(tmp_path, monkeypatch):
    """The control: the same build with its own --out is compared, and the regression fails it."""
    monkeypatch.chdir(tmp_path)
    shard, _ = _run_dir(tmp_path / "shard", BEFORE), _run_dir(tmp_path / "base", AFTER)
    code, _, err = _cli(
        ["merge", str(shard), "--out", "out", "--baseline", "base", "--fail-on-regression", "starts"]
    )
    assert code == 1 and "harness: regression: runner starts rose" in err, err


def test_a_baseline_of_this_builds_own_commit_and_run(tmp_path, monkeypatch):
    """The merged report kept as the baseline, then the same shards merged again: one line, exit 2 with a
    gate; without one, the summary says so instead of a table of zeros."""
    monkeypatch.chdir(tmp_path)
    shard = _run_dir(tmp_path / "shard", BEFORE)
    assert _cli(["merge", str(shard), "--out", "kept"])[0] == 0
    code, _, err = _cli(
        ["merge", str(shard), "--out", "again", "--baseline", "kept", "--fail-on-regression", "starts"]
    )
    assert code == 2 and "this build's own report" in err, err
    assert _cli(["merge", str(shard), "--out", "plain", "--baseline", "kept"])[0] == 0
    assert "this build's own report" in (tmp_path / "plain" / "summary.md").read_text()
    code, _, err = _cli(["compare", "kept", "again", "--fail-on-regression", "starts"])
    assert code == 2 and "one build's report" in err, err


SUITE = """
[tool.harness.suites.models]
paths = ["tests"]
"""


@pytest.mark.parametrize("case", ["out is the baseline", "out inside a folder of shard run directories"])
def test_run_refuses_an_out_that_overlaps_its_baseline_before_clearing_it(
    tmp_path, monkeypatch, fake_gpus, case
):
    fake_gpus([], vendor="nvidia")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text(SUITE)
    out, baseline = OVERLAPS[case]
    for where in ("base", "shards/a"):
        _run_dir(tmp_path / where, AFTER)
    kept = {p: p.read_bytes() for p in tmp_path.rglob("report.json")}
    code, _, err = _cli(["run", "--platform", "cpu", "--out", out, "--baseline", baseline, "models"])
    assert code == 2 and "compared with itself" in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob("report.json")} == kept
