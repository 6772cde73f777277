"""``harness ci matrix`` and the GitHub Actions workflows in ci/github/: valid, consistent, injection-safe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.platform import PLATFORMS

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "ci" / "github"
REUSABLE = WORKFLOWS / "harness.yml"
CALLER = WORKFLOWS / "example-caller.yml"

PYPROJECT = """
[tool.harness.suites.pooling]
paths = ["tests/models/pooling"]
[tool.harness.suites.generation]
paths = ["tests/models/generation"]
[tool.harness.ci.queues]
rocm = "mi300"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    return tmp_path


def harness(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def workflow(path: Path) -> dict:
    document = yaml.safe_load(path.read_text())
    document["on"] = document.pop(True, document.get("on"))  # YAML 1.1 reads the key `on` as true
    return document


def test_github_matrix_is_one_line_of_cells_with_unique_artifacts(project):
    done = harness(project, "ci", "matrix", "--format", "github")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1  # one line: it goes into $GITHUB_OUTPUT as matrix=<json>
    include = json.loads(done.stdout)["include"]
    assert [(cell["platform"], cell["suite"]) for cell in include] == [
        (platform, suite) for platform in PLATFORMS for suite in ("pooling", "generation")
    ]
    assert include[0] == {
        "platform": "cuda",
        "suite": "pooling",
        "session": "cuda_pooling",
        "run_dir": "harness-out/pooling-cuda",
        "artifact": "harness-cuda-pooling",
        "queue": "gpu-cuda",
    }
    assert len({cell["artifact"] for cell in include}) == len(include)
    assert {cell["queue"] for cell in include if cell["platform"] == "rocm"} == {"mi300"}


def test_json_matrix_lists_the_chosen_cells(project):
    done = harness(
        project, "ci", "matrix", "--format", "json", "--platforms", "cpu", "--suites", "generation"
    )
    assert done.returncode == 0, done.stderr
    assert [cell["session"] for cell in json.loads(done.stdout)] == ["cpu_generation"]


def test_matrix_and_buildkite_come_from_the_same_cells(project):
    matrix = json.loads(harness(project, "ci", "matrix", "--format", "json").stdout)
    pipeline = yaml.safe_load(harness(project, "ci", "buildkite").stdout)
    assert [f"{cell['platform']}-{cell['suite']}" for cell in matrix] == [s["key"] for s in pipeline["steps"]]
    assert [cell["queue"] for cell in matrix] == [s["agents"]["queue"] for s in pipeline["steps"]]


def validate(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            *map(str, paths),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_workflows_are_valid_against_the_github_workflows_schema():
    checked = validate(REUSABLE, CALLER)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_schema_check_rejects_a_broken_workflow(tmp_path):
    broken = workflow(REUSABLE)
    broken["jobs"]["test"]["strategy"]["fail-fast"] = "sometimes"
    del broken["jobs"]["matrix"]["runs-on"]
    (tmp_path / "broken.yml").write_text(yaml.safe_dump(broken))
    assert validate(tmp_path / "broken.yml").returncode == 1


def test_reusable_workflow_has_runner_labels_for_every_platform_and_a_hosted_cpu_job():
    inputs = workflow(REUSABLE)["on"]["workflow_call"]["inputs"]
    for platform in PLATFORMS:
        labels = json.loads(inputs[f"{platform}-runs-on"]["default"])
        assert isinstance(labels, list) and labels
    assert json.loads(inputs["cpu-runs-on"]["default"]) == ["ubuntu-latest"]
    assert "self-hosted" in json.loads(inputs["cuda-runs-on"]["default"])
    test = workflow(REUSABLE)["jobs"]["test"]
    assert test["runs-on"] == "${{ fromJSON(inputs[format('{0}-runs-on', matrix.platform)]) }}"
    assert test["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.matrix) }}"


def test_test_job_installs_nox_runs_the_session_and_uploads_a_unique_artifact():
    steps = workflow(REUSABLE)["jobs"]["test"]["steps"]
    uses = [step.get("uses", "").split("@")[0] for step in steps]
    assert uses[:2] == ["actions/checkout", "actions/setup-python"]
    runs = [step.get("run", "") for step in steps]
    assert any("pip install nox" in run for run in runs)
    assert any('nox -s "$SESSION"' in run for run in runs)
    assert any("GITHUB_STEP_SUMMARY" in run for run in runs)
    upload = next(step for step in steps if step.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()"
    assert "${{ matrix.artifact }}" in upload["with"]["name"]
    assert upload["with"]["path"] == "${{ matrix.run_dir }}"


def test_no_expression_is_pasted_into_a_shell_script():
    """Inputs and matrix values reach scripts only through env, so none can inject shell code."""
    for path in (REUSABLE, CALLER):
        for job in workflow(path)["jobs"].values():
            for step in job.get("steps", []):
                assert "${{" not in step.get("run", ""), (path.name, step)


def test_example_caller_passes_only_inputs_the_reusable_workflow_declares():
    inputs = workflow(REUSABLE)["on"]["workflow_call"]["inputs"]
    (job,) = workflow(CALLER)["jobs"].values()
    assert job["uses"] == "./.github/workflows/harness.yml"
    assert set(job["with"]) <= set(inputs)
    assert "'cpu'" in job["with"]["platforms"]  # a fork without GPU runners still runs the cpu cells


def matrix_step_script() -> str:
    steps = workflow(REUSABLE)["jobs"]["matrix"]["steps"]
    return next(step for step in steps if step.get("id") == "matrix")["run"]


@pytest.mark.parametrize(("platforms", "suites"), [("cuda,rocm,cpu", ""), ("cpu", "pooling")])
def test_the_matrix_step_script_writes_what_harness_ci_matrix_prints(project, platforms, suites):
    """Run the workflow's own script with bash, as the runner would, and read $GITHUB_OUTPUT back."""
    output = project / "github_output"
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        "PLATFORMS": platforms,
        "SUITES": suites,
        "GITHUB_OUTPUT": str(output),
    }
    done = subprocess.run(
        ["bash", "-e", "-c", matrix_step_script()], cwd=project, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    key, value = output.read_text().rstrip("\n").split("=", 1)
    assert key == "matrix"
    expected = ["--platforms", platforms] + (["--suites", suites] if suites else [])
    assert value + "\n" == harness(project, "ci", "matrix", "--format", "github", *expected).stdout


def test_the_matrix_step_fails_the_job_on_an_unsafe_input(project):
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        "PLATFORMS": "cuda",
        "SUITES": "pooling;$(touch pwned)",
        "GITHUB_OUTPUT": str(project / "github_output"),
    }
    done = subprocess.run(
        ["bash", "-e", "-c", matrix_step_script()], cwd=project, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "harness: error: suite name" in done.stderr
    assert not (project / "pwned").exists()
