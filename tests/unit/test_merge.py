"""One suite's report from its shards (``harness merge``) and before → after against the base branch's
(``--baseline``), over the real reports of docs/runs/: the naive pooling suite as the base branch's run,
the shipped one as the pull request's, each cut into two shards by test."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness.cli import main as harness

RUNS = Path(__file__).resolve().parents[2] / "docs" / "runs"


def shards(name: str, tmp_path: Path, suite: str = "pooling") -> list[str]:
    """``docs/runs/<name>.json`` as two shard reports (tests alternately, each runner with its test)."""
    report = json.loads((RUNS / f"{name}.json").read_text())
    report["suite"] = suite
    paths = []
    for index in range(2):
        part = copy.deepcopy(report)
        tests = {t["nodeid"] for i, t in enumerate(report["tests"]) if i % 2 == index}
        part["tests"] = [t for t in report["tests"] if t["nodeid"] in tests]
        part["records"] = [r for r in report["records"] if r.get("test") in tests]
        part["shard"] = f"{index}/2"
        path = tmp_path / f"{name}-{index}.json"
        path.write_text(json.dumps(part))
        paths.append(str(path))
    return paths


def test_shards_merged_and_compared_with_the_base_branch(tmp_path, capsys):
    base, pr = shards("pooling-naive-cpu", tmp_path), shards("pooling-cpu", tmp_path)
    assert harness(["merge", *base, "--out", str(tmp_path / "base")]) == 0
    merged = json.loads((tmp_path / "base" / "report.json").read_text())
    naive = json.loads((RUNS / "pooling-naive-cpu.json").read_text())
    assert merged["starts"]["total"]["by_kind"] == naive["starts"]["total"]["by_kind"]  # vllm 10, hf 3
    assert sorted(t["nodeid"] for t in merged["tests"]) == sorted(t["nodeid"] for t in naive["tests"])
    argv = ["merge", *pr, "--out", str(tmp_path / "pr"), "--baseline", str(tmp_path / "base")]
    assert harness([*argv, "--fail-on-regression", "starts"]) == 0
    summary = (tmp_path / "pr" / "summary.md").read_text()
    assert "## Before → after" in summary
    suite = next(line for line in summary.splitlines() if line.startswith("| suite |"))
    assert "10 → 3 (−7)" in suite
    rows = [line for line in summary.splitlines() if line.startswith("| `")]
    assert rows[0].startswith("| `examples/pooling_naive/test_embedding_naive.py` (removed) | 10 → —")
    assert any(r.startswith("| `tests/models/pooling/test_embedding.py` (added) | — → 3") for r in rows)
    capsys.readouterr()
    reverse = ["merge", *base, "--out", str(tmp_path / "rev"), "--baseline", str(tmp_path / "pr")]
    assert harness([*reverse, "--fail-on-regression", "starts"]) == 1
    err = capsys.readouterr().err
    assert "harness: regression: runner starts rose: 5 → 13 (+8)" in err
    assert "examples/pooling_naive/test_embedding_naive.py: vLLM starts — → 10" in err


def test_a_baseline_that_cannot_be_compared_is_one_line_in_the_summary(tmp_path):
    pr = shards("pooling-cpu", tmp_path)
    other = shards("pooling-naive-cpu", tmp_path, suite="pooling-naive")
    assert harness(["merge", *other, "--out", str(tmp_path / "other")]) == 0
    (tmp_path / "corrupt.json").write_text('{"version": 1, "tests": [')
    for baseline, said in (
        (tmp_path / "other", "is of suite 'pooling-naive', this run of 'pooling': not compared"),
        (tmp_path / "missing", "no baseline at "),
        (tmp_path / "corrupt.json", "cannot be compared: "),
    ):
        assert harness(["merge", *pr, "--out", str(tmp_path / "pr"), "--baseline", str(baseline)]) == 0
        summary = (tmp_path / "pr" / "summary.md").read_text()
        assert said in summary and "| suite |" not in summary


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda r: r.update(suite="generation"), "the shards are of different suites"),
        (lambda r: r["platform"].update(name="cuda"), "the shards are of different platforms"),
        (lambda r: r.setdefault("versions", {}).update(commit="abc"), "the shards are of different commits"),
        (lambda r: r.update(version=99), "report format version 99"),
        (lambda r: r.update(shard="1/3"), "the shards are of splits into 2 and 3"),
        (lambda r: r.update(shard=None), "the shards are not all of one split (0/2, None)"),
        (lambda r: r.update(shard="0/2"), "shard 1/2 of 2 missing: its job left no report to merge"),
    ],
    ids=["suites", "platforms", "commits", "a newer format", "two splits", "unsharded", "a missing shard"],
)
def test_shards_that_do_not_belong_together_are_one_line_and_exit_2(tmp_path, capsys, change, said):
    first, second = shards("pooling-cpu", tmp_path)
    report = json.loads(Path(second).read_text())
    change(report)
    Path(second).write_text(json.dumps(report))
    assert harness(["merge", first, second, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err


def test_a_test_in_two_shards_is_one_line_and_exit_2(tmp_path, capsys):
    first, _ = shards("pooling-cpu", tmp_path)
    assert harness(["merge", first, first, "--out", str(tmp_path / "out")]) == 2
    assert "ran in two shards" in capsys.readouterr().err


def test_harness_run_opens_its_summary_with_before_after_the_baseline(tmp_path, monkeypatch, fake_gpus):
    fake_gpus([], vendor="nvidia")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.harness.suites.s]\npaths = ["tests"]\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    assert harness(["run", "--platform", "cpu", "--out", "base", "s"]) == 0
    assert "Before → after" not in (tmp_path / "base" / "summary.md").read_text()
    monkeypatch.setenv("HARNESS_BASELINE", "base")  # the setting, as CI passes it
    assert harness(["run", "--platform", "cpu", "--out", "pr", "s"]) == 0
    summary = (tmp_path / "pr" / "summary.md").read_text().splitlines()
    assert summary[2:5] == ["## Before → after", "", "Against base."]
    assert any(line.startswith("| suite | 0 → 0 (±0) | 0 → 0 (±0) |") for line in summary)


def test_a_folder_of_shard_run_directories_is_a_baseline(tmp_path):
    """The base branch's shards as CI downloaded them (one run directory each), unmerged."""
    folder = tmp_path / "base-build"
    for index, path in enumerate(shards("pooling-naive-cpu", tmp_path)):
        (folder / f"pooling-cpu-{index}of2").mkdir(parents=True)
        Path(path).rename(folder / f"pooling-cpu-{index}of2" / "report.json")
    pr = shards("pooling-cpu", tmp_path)
    assert harness(["merge", *pr, "--out", str(tmp_path / "pr"), "--baseline", str(folder)]) == 0
    summary = (tmp_path / "pr" / "summary.md").read_text()
    assert "| suite | 10 → 3 (−7) |" in summary
