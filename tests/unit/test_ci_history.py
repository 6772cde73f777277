"""The generated CI restores each test step's history from what the compare step keeps: the base branch's
last report (a keeping build: its own branch's last), and a pull request's own previous attempt; the
run is pointed at both (HARNESS_HISTORY, the first usable wins)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.actions_expressions import evaluate
from tests.unit.test_ci_baseline import CI, MAIN_BUILD, PR_BUILD
from tests.unit.test_ci_buildkite import generate, project
from tests.unit.test_ci_github import REUSABLE, workflow


def _steps(tmp_path: Path, build: dict) -> tuple[dict, dict]:
    test, merge = generate(project(tmp_path, CI), "--parallelism", "2", env={**os.environ, **build})["steps"]
    return test, merge


def _cache(step: dict, mode: str) -> list[dict]:
    return [
        entry
        for plugin in step["plugins"]
        for name, entry in plugin.items()
        if name.startswith("cache#") and mode in entry and not entry["path"].startswith("harness-compile/")
    ]  # the compile cache: tests/unit/test_ci_compile_cache.py


@pytest.mark.parametrize("build", [MAIN_BUILD, PR_BUILD], ids=["main", "pull request"])
def test_each_test_step_restores_what_a_merge_step_saves(tmp_path, build):
    """Old code: the test step restored nothing and set no history."""
    test, merge = _steps(tmp_path, build)
    restored = {(entry["path"], entry["key-extra"]) for entry in _cache(test, "restore")}
    assert test["env"]["HARNESS_HISTORY"] == "harness-compare/pooling-cpu:harness-baseline/pooling-cpu"
    assert all(entry["soft-fail"] is True for entry in _cache(test, "restore"))
    saved = {(entry["path"], entry["key-extra"]) for entry in _cache(merge, "save")}
    if build is MAIN_BUILD:  # its merge step keeps the baseline its next build restores
        assert saved == restored == {("harness-baseline/pooling-cpu", "cpu-pooling@main")}
    else:  # the base's baseline, and this branch's previous attempt, which its merge step saves
        (base,) = _cache(merge, "restore")
        assert (base["path"], base["key-extra"]) in restored
        assert saved == {("harness-compare/pooling-cpu", "cpu-pooling@attempt@fewer-starts")}
        assert saved < restored


def test_the_github_test_job_restores_what_the_compare_job_saves():
    jobs = workflow(REUSABLE)["jobs"]
    # a cell's row (a compare job's: its history is its own platform's) and the GPU-free CPU row of it
    cell = {"suite": "pooling", "platform": "cuda", "history_platform": "cuda", "compile_cache": "c"}
    github = {"sha": "abc", "run_attempt": 1}
    baseline = evaluate(jobs["compare"]["env"]["BASELINE"], {"matrix": cell})
    contexts = {"matrix": cell, "github": github, "env": {"BASELINE": baseline}}
    saved = {
        evaluate(step["with"]["path"], contexts): evaluate(step["with"]["key"], contexts)
        for step in jobs["compare"]["steps"]
        if "cache/save" in step.get("uses", "")
    }
    for row in (cell, {**cell, "platform": "cpu", "compile_cache": ""}):
        restored = {
            evaluate(step["with"]["path"], {"matrix": row}): evaluate(
                step["with"]["restore-keys"], {"matrix": row}
            )
            for step in jobs["test"]["steps"]
            if "cache/restore" in step.get("uses", "") and "(history)" in step.get("name", "")
        }
        assert restored.keys() == saved.keys()
        for path, prefix in restored.items():
            assert saved[path].startswith(prefix)
    steps = {step.get("name"): step for step in jobs["test"]["steps"]}
    history = evaluate(steps["nox -s ${{ matrix.session }}"]["env"]["HARNESS_HISTORY"], {"matrix": cell})
    assert history.split(":") == sorted(restored, reverse=True)  # this PR's attempt, then the base's
