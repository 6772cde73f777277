"""The GitHub side of the history (issue 52, items 3 and 4): ``harness ci matrix --history DIR`` writes each
job's ``timeout_minutes`` from the recorded durations by the rule Buildkite's ``timeout_in_minutes`` follows,
and under ``gpu_free_job`` a CPU row for a GPU cell's GPU-free tests; the reusable workflow's scripts carry
it from the cache to the jobs, and what they carry parses back through the harness's own readers."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.ci import step_timeouts
from harness.ci.matrix import CI_KINDS
from harness.cli import _parser
from harness.config.settings import CI_DEADLINE, ci_deadline
from harness.config.validate import check
from harness.report import gpu_free_job
from harness.report.gpu_free import GPU_PLATFORMS
from harness.report.previous import first_usable
from harness.report.store import load
from tests.unit.actions_expressions import evaluate, to_string
from tests.unit.test_ci_buildkite import generate, harness, project
from tests.unit.test_ci_github import REUSABLE, workflow
from tests.unit.test_gpu_free_job import as_gpu_history, keep

ROOT = Path(__file__).resolve().parents[2]
LINT = ROOT / ".nox" / "lint" / "bin"
CI = '[tool.harness.ci]\nplatforms = ["cuda", "cpu"]\nsuites = ["pooling"]\nprebuilt_image = true\n'
FREE = CI + "gpu_free_job = true\n"


@pytest.fixture(scope="module")
def history() -> dict:
    """The shipped pooling run as a cuda cell's last merged report, some of its tests GPU-free there."""
    report = as_gpu_history(load(ROOT / "docs/runs/pooling-cpu.json"))
    assert report["gpu_free"]["tests"]
    return report


def durations(report: dict, seconds: dict[str, float]) -> dict:
    base = {**report["tests"][0], "setup_s": 0.0, "teardown_s": 0.0, "outcome": "passed"}
    tests = [{**base, "nodeid": nodeid, "call_s": value} for nodeid, value in seconds.items()]
    return {**report, "tests": tests}


def as_cpu(report: dict) -> dict:
    return {**report, "platform": {**report["platform"], "name": "cpu"}}


def matrix(root: Path, *args: str) -> tuple[dict, str]:
    """``harness ci matrix --format github-output`` as the workflow's matrix job runs it: its outputs."""
    done = harness(root, "ci", "matrix", "--format", "github-output", *args)
    assert done.returncode == 0, done.stderr
    written = dict(line.split("=", 1) for line in done.stdout.splitlines())
    return {name: json.loads(value) for name, value in written.items()}, done.stderr


def test_each_jobs_timeout_comes_from_its_cells_recorded_durations(tmp_path, history):
    """A cpu cell whose last build took 120 s + 60 s in its one job: (180 s x 1.5) / 60 + 20 = 25 min; the
    cuda cell without history: the bound (the workflow's timeout-minutes input). Old code: no --history,
    and every job took the input's timeout."""
    root = project(tmp_path, CI)
    report = durations(history, {"tests/a.py::t": 120.0, "tests/b.py::t": 60.0})
    keep(tmp_path / "harness-baseline/pooling-cpu", as_cpu(report))
    outputs, stderr = matrix(root, "--history", "harness-baseline", "--timeout-in-minutes", "90")
    minutes = {row["platform"]: row["timeout_minutes"] for row in outputs["matrix"]["include"]}
    assert minutes == {
        "cpu": math.ceil(180 * step_timeouts.FACTOR / 60 + step_timeouts.MARGIN_MIN),
        "cuda": 90,
    }
    assert minutes["cpu"] == 25
    assert "cuda-pooling timeout_in_minutes 90: no history: harness-baseline/pooling-cuda: no such" in stderr
    # one rule for both CI systems: Buildkite's step of the same cell, as one job, writes the same minutes
    pipeline = generate(root, "--history", "harness-baseline", "--parallelism", "1")
    steps = {step["key"]: step for step in pipeline["steps"]}
    assert steps["cpu-pooling"]["timeout_in_minutes"] == step_timeouts.minutes([180.0], 180) == 25
    # a history past the bound: the bound wins
    slow = durations(history, {"tests/a.py::t": 10_000.0})
    keep(tmp_path / "harness-baseline/pooling-cpu", as_cpu(slow))
    outputs, _ = matrix(root, "--history", "harness-baseline", "--timeout-in-minutes", "90")
    assert {row["timeout_minutes"] for row in outputs["matrix"]["include"]} == {90}


@pytest.mark.parametrize("given", ["0", "10081", "x"])
def test_a_timeout_bound_the_jobs_could_not_take_is_one_line_and_exit_2(tmp_path, given):
    root = project(tmp_path, CI)
    done = harness(root, "ci", "matrix", "--timeout-in-minutes", given)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("harness: error: ") and "--timeout-in-minutes" in line and given in line
    assert "unrecognized" not in line
    assert harness(root, "ci", "matrix", "--timeout-in-minutes", "10080").returncode == 0


def test_the_gpu_free_tests_get_a_cpu_row_and_the_gpu_row_leaves_them_out(tmp_path, history):
    """Mirrors Buildkite's CPU step: the cpu session on a cpu runner, the GPU cell's history, only the
    listed tests; the GPU row deselects them; the compare job of the cell keeps the CPU job's report. Old
    code: one row per cell, every test on the GPU runner."""
    root = project(tmp_path, FREE)
    keep(tmp_path / "harness-baseline/pooling-cuda", history)
    outputs, stderr = matrix(root, "--history", "harness-baseline")
    gpu, cpu, cpu_cell = outputs["matrix"]["include"]
    assert (gpu["platform"], gpu["gpu_free"]) == ("cuda", "deselect")
    assert cpu == {
        **cpu_cell,
        "label": "cuda pooling: GPU-free tests on the CPU",
        "run_dir": "harness-out/pooling-cuda-gpu-free",  # harness run --gpu-free only's own default
        "artifact": "harness-cuda-pooling-gpu-free",
        "timeout_minutes": gpu["timeout_minutes"],
        "history_platform": "cuda",
        "compile_cache": "",
        "gpu_free": "only",
    }
    assert cpu_cell["gpu_free"] == "" and cpu_cell["history_platform"] == "cpu"
    assert outputs["cells"]["include"] == [gpu, cpu_cell]  # the compare jobs: one per cell
    assert gpu["gpu_free_artifact"] == cpu["artifact"]
    count = len(history["gpu_free"]["tests"])
    assert (
        f"cuda-pooling gpu_free_job: {count} GPU-free tests listed in harness-baseline/pooling-cuda" in stderr
    )
    # Buildkite, from the same folder: the same cell moves, with the same modes
    steps = {step["key"]: step for step in generate(root, "--history", "harness-baseline")["steps"]}
    assert steps["cuda-pooling"]["env"]["HARNESS_GPU_FREE"] == gpu["gpu_free"]
    assert steps["cuda-pooling-gpu-free"]["env"]["HARNESS_GPU_FREE"] == cpu["gpu_free"]
    assert steps["cuda-pooling-gpu-free"]["timeout_in_minutes"] == cpu["timeout_minutes"]


def test_with_no_history_nothing_moves_and_it_says_so_in_one_line(tmp_path, history):
    root = project(tmp_path, FREE)
    outputs, stderr = matrix(root, "--history", "harness-baseline")
    assert [row["gpu_free"] for row in outputs["matrix"]["include"]] == ["", ""]
    assert outputs["cells"] == outputs["matrix"]
    lines = [line for line in stderr.splitlines() if "gpu_free_job" in line]
    assert lines == [
        "harness: cuda-pooling gpu_free_job: nothing moves to the GPU-free job: no history "
        "(harness-baseline/pooling-cuda: no such report file)"
    ]
    keep(tmp_path / "harness-baseline/pooling-cuda", history)  # a history, the setting off: nothing moves
    (tmp_path / "pyproject.toml").write_text(PYPROJECT_OFF(tmp_path))
    outputs, stderr = matrix(root, "--history", "harness-baseline")
    assert len(outputs["matrix"]["include"]) == 2 and "gpu_free_job" not in stderr


def PYPROJECT_OFF(root: Path) -> str:  # noqa: N802 - reads as the constant it builds
    return (root / "pyproject.toml").read_text().replace("gpu_free_job = true\n", "")


def nox_env(row: dict) -> dict[str, str]:
    """The test job's nox step environment for a row, its expressions evaluated as GitHub does."""
    job = workflow(REUSABLE)["jobs"]["test"]
    step = next(step for step in job["steps"] if step.get("name", "").startswith("nox -s"))
    contexts = {"matrix": row, "inputs": {}, "secrets": {}}
    return {name: to_string(evaluate(str(value), contexts)) for name, value in step["env"].items()}


def test_what_the_rows_carry_parses_back_through_the_harnesss_own_readers(tmp_path, history):
    """Each row through the workflow's expressions: the job's timeout-minutes is one [tool.harness.ci]
    timeout_in_minutes takes, its deadline runs through bash into the settings' reader, HARNESS_GPU_FREE is
    a mode harness run takes, and HARNESS_HISTORY as each job restores it lists the same tests for the GPU
    job and its CPU job (restored with the GPU cell's cache keys)."""
    root = project(tmp_path, FREE)
    keep(tmp_path / "harness-baseline/pooling-cuda", history)
    outputs, _ = matrix(root, "--history", "harness-baseline")
    job = workflow(REUSABLE)["jobs"]["test"]
    deadline = job["steps"][0]
    os.chdir(tmp_path)  # the jobs' places are relative to the checkout
    listed = []
    for row in outputs["matrix"]["include"]:
        minutes = evaluate(job["timeout-minutes"], {"matrix": row})
        assert check("timeout_in_minutes", minutes, CI_KINDS["timeout_in_minutes"]) == row["timeout_minutes"]
        timeout = to_string(evaluate(deadline["env"]["TIMEOUT_MINUTES"], {"matrix": row}))
        (tmp_path / "env").unlink(missing_ok=True)
        env = {**os.environ, "TIMEOUT_MINUTES": timeout, "GITHUB_ENV": str(tmp_path / "env")}
        subprocess.run(["bash", "-e", "-c", deadline["run"]], env=env, check=True)
        name, value = (tmp_path / "env").read_text().strip().split("=")
        assert name == CI_DEADLINE and ci_deadline({CI_DEADLINE: value}) is not None
        env = nox_env(row)
        mode = env["HARNESS_GPU_FREE"]
        assert gpu_free_job.mode(mode) == (mode or None)
        if mode:
            assert _parser().parse_args(["run", "pooling", "--gpu-free", mode]).gpu_free == mode
            gpu = GPU_PLATFORMS if mode == "only" else (row["platform"],)
            found = first_usable(env["HARNESS_HISTORY"], "pooling", gpu, what="--history")
            listed.append(gpu_free_job.listed(found).tests)
        restores = [s for s in job["steps"] if "(history)" in s.get("name", "")]
        paths = {evaluate(s["with"]["path"], {"matrix": row}) for s in restores}
        assert paths == set(env["HARNESS_HISTORY"].split(":"))  # what the job restores is what it reads
    assert listed == [sorted(t["nodeid"] for t in history["gpu_free"]["tests"])] * 2


def run_script(job: str, name: str, cwd: Path, env: dict, path: str | None = None) -> None:
    step = next(s for s in workflow(REUSABLE)["jobs"][job]["steps"] if s.get("name") == name)
    contexts = {"matrix": env.pop("matrix", {}), "inputs": {}}
    values = {k: to_string(evaluate(str(v), contexts)) for k, v in step.get("env", {}).items()}
    full = {**os.environ, **values, **env}
    if path:
        full["PATH"] = os.pathsep.join([path, full["PATH"]])
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=cwd, env=full, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


HARNESS_STUB = """#!/bin/sh
printf '%s\\n' "$*" >> "$HARNESS_LOG"
"""


def test_the_workflow_carries_the_reports_from_the_compare_jobs_to_the_next_matrix(tmp_path, history):
    """The chain as the workflow's own scripts run it: the compare job keeps the CPU job's report beside the
    cell's (``<out>/gpu-free/``), keep-history lays the cells' kept reports out as harness-baseline/, and the
    matrix job's script reads them into timeouts and the GPU-free CPU row."""
    root = project(tmp_path, FREE)
    cpu_report = {**history, "platform": {**history["platform"], "name": "cpu"}}
    keep(tmp_path / "harness-artifacts/harness-cuda-pooling-attempt-1", history)
    keep(tmp_path / "harness-gpu-free/harness-cuda-pooling-gpu-free-attempt-1", cpu_report)
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "harness").write_text(HARNESS_STUB)
    (stub / "harness").chmod(0o755)
    row = {"platform": "cuda", "suite": "pooling", "artifact": "harness-cuda-pooling"}
    row |= {"gpu_free_artifact": "harness-cuda-pooling-gpu-free", "fail_on_regression": ""}
    env = {"KEEPS": "true", "BASELINE": "harness-baseline/pooling-cuda", "HARNESS_LOG": str(tmp_path / "log")}
    env |= {"GITHUB_STEP_SUMMARY": str(tmp_path / "summary"), "matrix": row}
    run_script("compare", "Before -> after", root, env, str(stub))
    kept = tmp_path / "harness-baseline/pooling-cuda"
    assert json.loads((kept / "gpu-free/report.json").read_text()) == cpu_report
    assert (tmp_path / "log").read_text().split() == [
        "merge", "harness-artifacts/harness-cuda-pooling-attempt-1", "--out", "harness-baseline/pooling-cuda"
    ]  # fmt: skip
    (kept / "report.json").write_text(json.dumps(history))  # what the real merge writes there
    # the compare job uploads it as harness-history-<suite>-<platform>; keep-history downloads them all
    artifacts = tmp_path / "next"
    shutil.copytree(kept, artifacts / "harness-history/harness-history-pooling-cuda")
    (artifacts / "pyproject.toml").write_text((tmp_path / "pyproject.toml").read_text())
    output = tmp_path / "output"
    run_script("keep-history", "Lay them out as harness-baseline/<suite>-<platform>", artifacts,
               {"GITHUB_OUTPUT": str(output)})  # fmt: skip
    assert output.read_text() == "found=true\n"
    assert (artifacts / "harness-baseline/pooling-cuda/gpu-free/report.json").is_file()
    # the next run's matrix job, its cache restored: its script, run by bash
    step = next(s for s in workflow(REUSABLE)["jobs"]["matrix"]["steps"] if s.get("id") == "matrix")
    env = {"PLATFORMS": "cuda,cpu", "SUITES": "", "TIMEOUT_MINUTES": "180", "GITHUB_OUTPUT": str(output)}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    output.unlink()
    done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=artifacts, env={**os.environ, **env},
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = dict(line.split("=", 1) for line in output.read_text().splitlines())
    rows = json.loads(written["matrix"])["include"]
    assert [(r["label"], r["gpu_free"]) for r in rows] == [
        ("cuda pooling", "deselect"),
        ("cuda pooling: GPU-free tests on the CPU", "only"),
        ("cpu pooling", ""),
    ]
    assert rows[0]["timeout_minutes"] < 180  # from the recorded durations
    assert json.loads(written["baseline_branches"]) == []


def lay_out(tmp_path: Path) -> Path:
    """ci/github as a repository's .github/workflows, as the lint session lays it out."""
    repository = tmp_path / "repository"
    shutil.copytree(ROOT / "ci" / "github", repository / ".github" / "workflows")
    (repository / ".git").mkdir()
    return repository


@pytest.mark.skipif(not (LINT / "actionlint").exists(), reason="actionlint not in .nox/lint")
def test_actionlint_accepts_the_workflow_and_checks_the_timeouts_expression(tmp_path):
    """``timeout-minutes: ${{ matrix.timeout_minutes }}`` is an expression actionlint checks: a context
    the job-level key cannot read there is refused, the matrix's is not."""
    repository = lay_out(tmp_path)
    done = subprocess.run([str(LINT / "actionlint")], cwd=repository, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    reusable = repository / ".github/workflows/harness.yml"
    text = reusable.read_text()
    assert "    timeout-minutes: ${{ matrix.timeout_minutes }}\n" in text
    reusable.write_text(text.replace("${{ matrix.timeout_minutes }}", "${{ steps.history.outputs.minutes }}"))
    done = subprocess.run([str(LINT / "actionlint")], cwd=repository, capture_output=True, text=True)
    assert done.returncode == 1 and 'context "steps" is not allowed here' in done.stdout


@pytest.mark.skipif(not (LINT / "zizmor").exists(), reason="zizmor not in .nox/lint")
def test_zizmor_finds_nothing_of_medium_severity_in_the_workflows(tmp_path):
    repository = lay_out(tmp_path)
    done = subprocess.run(
        [str(LINT / "zizmor"), "--offline", "--min-severity", "medium", ".github/workflows"],
        cwd=repository,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
