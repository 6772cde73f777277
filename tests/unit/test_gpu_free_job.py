"""``[tool.harness.ci] gpu_free_job``: the GPU-free tests a GPU cell's history lists get a CPU step of their
own (Buildkite) and a CPU job (GitHub), the GPU steps leave them out, and on that job a listed test that
starts a runner fails saying which report listed it and what it started (a real HF load on the CPU)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.report import gpu_free, gpu_free_job
from harness.report.gpu_free import GPU_PLATFORMS
from harness.report.previous import first_usable
from harness.report.store import load
from tests.unit.test_ci_baseline import MAIN_BUILD
from tests.unit.test_ci_buildkite import generate, harness, project, validate

ROOT = Path(__file__).resolve().parents[2]
CI = (
    '[tool.harness.ci]\nplatforms = ["cuda"]\nsuites = ["pooling"]\nprebuilt_image = true\n'
    "gpu_free_job = true\n"
)


def as_gpu_history(report: dict, platform: str = "cuda") -> dict:
    """A real CPU report as a GPU cell's last merged report: its platform renamed, its ``gpu_free`` judged
    as on that GPU (no runner alive, no device memory), the way the report judges a GPU run."""
    report = {**report, "platform": {**report["platform"], "name": platform}}
    report["gpu_free"] = gpu_free.section(platform, report["tests"], report["records"], report["workers"])
    return report


def keep(folder: Path, report: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps(report))
    return folder


@pytest.fixture(scope="module")
def history() -> dict:
    report = as_gpu_history(load(ROOT / "docs/runs/pooling-cpu.json"))
    assert report["gpu_free"]["tests"], "the shipped pooling run has tests that start no runner"
    return report


def test_the_gpu_free_tests_get_a_cpu_step_and_the_gpu_step_leaves_them_out(tmp_path, history):
    """Old code: ``gpu_free_job`` was an unknown key (exit 2) and every test ran on the GPU agents."""
    keep(tmp_path / "harness-baseline/pooling-cuda", history)
    made = generate(project(tmp_path, CI), "--history", "harness-baseline", env={**os.environ, **MAIN_BUILD})
    test, cpu, merge = made["steps"]
    assert test["env"]["HARNESS_GPU_FREE"] == "deselect"
    assert cpu["key"] == "cuda-pooling-gpu-free" and cpu["agents"] == {"queue": "cpu"}
    assert cpu["env"] == {
        "HARNESS_HISTORY": test["env"]["HARNESS_HISTORY"],
        "HARNESS_GPU_FREE": "only",
        "HARNESS_SELECT": "shadow",
    }
    assert any("nox -s cpu_pooling" in command for command in cpu["commands"])  # the CPU session
    assert cpu["artifact_paths"] == ["harness-out/pooling-cuda-gpu-free/**/*"]
    restored = [entry for plugin in cpu["plugins"] for entry in plugin.values()]
    assert restored == [
        entry
        for plugin in test["plugins"]
        for entry in plugin.values()
        if "harness-baseline" in entry["path"]
    ]
    assert merge["depends_on"] == ["cuda-pooling", "cuda-pooling-gpu-free"]
    assert any("harness-baseline/pooling-cuda/gpu-free/report.json" in c for c in merge["commands"])
    assert validate(tmp_path / "pipeline.yml").returncode == 0


def test_with_no_history_or_the_setting_off_nothing_moves_and_it_says_so(tmp_path, history):
    root = project(tmp_path, CI)
    done = harness(root, "ci", "buildkite", "--history", "harness-baseline")
    assert done.returncode == 0, done.stderr
    assert "cuda-pooling gpu_free_job: nothing moves to the GPU-free job: no history" in done.stderr
    assert "HARNESS_GPU_FREE" not in done.stdout and "gpu-free" not in done.stdout
    keep(tmp_path / "harness-baseline/pooling-cuda", history)
    (tmp_path / "pyproject.toml").write_text(
        (tmp_path / "pyproject.toml").read_text().replace("gpu_free_job = true", "")
    )
    off = harness(root, "ci", "buildkite", "--history", "harness-baseline")
    assert off.returncode == 0 and "gpu-free" not in off.stdout and "gpu_free_job" not in off.stderr


def test_what_the_steps_carry_parses_back_to_the_list_the_pipeline_was_made_from(tmp_path, history):
    """The steps' HARNESS_GPU_FREE values are harness run's own choices, and their HARNESS_HISTORY, as each
    job restores it, lists the same tests for the GPU step and the CPU job."""
    keep(tmp_path / "harness-baseline/pooling-cuda", history)
    test, cpu, _ = generate(project(tmp_path, CI), "--history", "harness-baseline")["steps"]
    from harness.cli import _parser as build_parser

    for step in (test, cpu):
        mode = step["env"]["HARNESS_GPU_FREE"]
        assert gpu_free_job.mode(mode) == mode
        assert build_parser().parse_args(["run", "pooling", "--gpu-free", mode]).gpu_free == mode
    os.chdir(tmp_path)  # the steps' places are relative to the checkout
    gpu = gpu_free_job.listed(first_usable(test["env"]["HARNESS_HISTORY"], "pooling", ("cuda",), what="h"))
    alone = gpu_free_job.listed(
        first_usable(cpu["env"]["HARNESS_HISTORY"], "pooling", GPU_PLATFORMS, what="h")
    )
    assert gpu.tests == alone.tests == sorted(t["nodeid"] for t in history["gpu_free"]["tests"])
    assert alone.platform == "cuda" and alone.source == "harness-baseline/pooling-cuda"


def test_a_test_that_passed_on_the_cpu_job_stays_moved_and_one_that_failed_goes_back(tmp_path, history):
    """The CPU job's kept report (the merge step's ``<out>/gpu-free/``) decides the next build's list with
    the GPU run's own judgement: otherwise a moved test, absent from the GPU report, would move back."""
    listed = [t["nodeid"] for t in history["gpu_free"]["tests"]]
    gpu = {**history, "gpu_free": {"tests": [], "gpu_minutes": 0}}  # the GPU steps ran none of them
    folder = keep(tmp_path / "pooling-cuda", gpu)
    cpu = {**history, "platform": {**history["platform"], "name": "cpu"}}
    cpu["tests"] = [
        {**t, "outcome": "failed" if t["nodeid"] == listed[0] else "passed"}
        for t in history["tests"]
        if t["nodeid"] in listed
    ]
    keep(folder / "gpu-free", cpu)
    found = first_usable(str(folder), "pooling", ("cuda",), what="--history")
    assert gpu_free_job.listed(found).tests == sorted(listed[1:])


TESTS = """
import os

def test_plain():
    assert sum(range(4)) == 6

def test_loads_a_model():
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = os.path.join(os.path.dirname(__file__), "tiny")
    config = GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=16)
    GPT2LMHeadModel(config).save_pretrained(folder)
    assert GPT2LMHeadModel.from_pretrained(folder) is not None
"""


def _run(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS", "PYTEST_XDIST"))}
    return subprocess.run(
        [sys.executable, "-m", "harness", "run", "free", "--platform", "cpu", *args],
        cwd=root,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def suite(tmp_path_factory, built_once) -> Path:
    """A suite of a plain test and one that loads a tiny HF model, run once on the CPU (once for the
    session's workers), its report then read as a CUDA cell's that listed both GPU-free (as if the load had
    been added since); each module's copy of it its own."""
    root = tmp_path_factory.mktemp("gpu-free-job")
    shutil.copytree(built_once("gpu-free-job", _gpu_free_suite), root, dirs_exist_ok=True)
    return root


def _gpu_free_suite(root: Path) -> None:
    (root / "pyproject.toml").write_text('[tool.harness.suites.free]\npaths = ["test_free.py"]\n')
    (root / "test_free.py").write_text(TESTS)
    done = _run(root, "--out", "first")
    assert done.returncode == 0, done.stdout + done.stderr
    report = as_gpu_history(load(root / "first"))
    report["gpu_free"]["tests"] = [
        {"nodeid": t["nodeid"], "seconds": 1.0, "devices": 1, "gpu_minutes": 1 / 60} for t in report["tests"]
    ]
    keep(root / "harness-baseline/free-cuda", report)


def test_a_listed_test_that_starts_a_runner_on_the_cpu_job_fails_saying_why(suite):
    """Old code: HARNESS_GPU_FREE meant nothing, every test ran, and the load passed on the CPU unnoticed."""
    done = _run(
        suite, HARNESS_GPU_FREE="only", HARNESS_HISTORY="harness-compare/free-cuda:harness-baseline/free-cuda"
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "2 GPU-free tests listed in harness-baseline/free-cuda: run here, on the CPU" in out
    report = load(suite / "harness-out/free-cuda-gpu-free")
    assert {t["nodeid"]: t["outcome"] for t in report["tests"]} == {
        "test_free.py::test_plain": "passed",
        "test_free.py::test_loads_a_model": "failed",
    }
    assert (
        "test_free.py::test_loads_a_model was listed GPU-free in harness-baseline/free-cuda and runs on the "
        "CPU job for that, but it started 1 runner(s) (hf runner" in out
    )
    assert "it needs a GPU" in out


def test_a_gpu_step_leaves_the_listed_tests_out(suite):
    report = load(suite / "harness-baseline/free-cuda")
    listing = {
        "mode": "deselect",
        "source": "harness-baseline/free-cuda",
        "tests": ["test_free.py::test_loads_a_model"],
    }
    (suite / "gpu-free.json").write_text(json.dumps(listing))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HARNESS", "PYTEST_XDIST"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "test_free.py", "--harness", "-p", "no:cacheprovider", "-q"],
        cwd=suite,
        env={**clean, "HARNESS_GPU_FREE_TESTS": str(suite / "gpu-free.json"), "HARNESS_PLATFORM": "cpu"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 1 deselected" in done.stdout
    assert report["suite"] == "free"


def test_the_cpu_job_with_no_history_runs_nothing_and_says_so(suite):
    done = _run(suite, HARNESS_GPU_FREE="only", HARNESS_HISTORY="nowhere")
    assert done.returncode == 0
    assert "nothing moves to the GPU-free job: no history" in done.stderr


def test_the_cpu_job_on_a_gpu_platform_is_refused_in_one_line(suite):
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "free", "--platform", "cuda", "--gpu-free", "only"],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "wrong shape"])
def test_a_gpu_free_list_that_is_no_list_file_is_one_line_and_never_blocks(tmp_path, kind):
    """Old code: the session read HARNESS_GPU_FREE_TESTS with ``read_text``; a FIFO without a writer hung
    pytest. Now the one loader refuses it (and a directory, a device, a list of another shape) at once."""
    (tmp_path / "test_x.py").write_text("def test_x(): pass\n")
    path = tmp_path / "list"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        path = Path("/dev/zero")
    else:
        path.write_text(json.dumps({"mode": "only", "source": None, "tests": [1]}))
    env = {**os.environ, "HARNESS_GPU_FREE_TESTS": str(path)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--harness", "test_x.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,  # old code: a FIFO never returned
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if "HARNESS_GPU_FREE_TESTS" in line]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
