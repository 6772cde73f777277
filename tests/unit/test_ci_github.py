"""``harness ci matrix`` and the GitHub Actions workflows in ci/github/: valid, consistent, injection-safe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from harness import __version__
from harness.config.settings import CI_DEADLINE
from harness.platform import PLATFORMS
from harness.platform.jobs import DEFAULT_CELLS as CI_PLATFORMS
from tests.unit.actions_expressions import evaluate, to_string

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
        (platform, suite) for platform in CI_PLATFORMS for suite in ("pooling", "generation")
    ]
    assert include[0] == {
        "platform": "cuda",
        "suite": "pooling",
        "label": "cuda pooling",  # the job's name
        "session": "cuda_pooling",
        "run_dir": "harness-out/pooling-cuda",
        "artifact": "harness-cuda-pooling",
        "queue": "gpu-cuda",
        "image": "",  # no [tool.harness.ci.images]: every job runs on its runner
        "container_options": "",
        "timeout_minutes": 180,  # no --history: the setting's
        "history_platform": "cuda",  # whose kept reports are the job's history
        "compile_cache": "harness-compile/pooling-cuda",
        "gpu_free": "",  # gpu_free_job off: every test on the cell's runner
        "select": "shadow",  # HARNESS_SELECT: a pull request selects in shadow unless the project says on
        "fail_on_regression": "",  # the gate is off unless [tool.harness.ci] fail_on_regression is set
        "baseline_branches": [],  # pushes to the default branch keep the baseline
        "gpu_free_artifact": "",
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
    steps = pipeline["steps"][::2]  # each cell's test step, then its baseline step
    assert [f"{cell['platform']}-{cell['suite']}" for cell in matrix] == [s["key"] for s in steps]
    assert [cell["queue"] for cell in matrix] == [s["agents"]["queue"] for s in steps]


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


def test_test_job_checks_out_runs_the_session_and_uploads_a_unique_artifact():
    steps = workflow(REUSABLE)["jobs"]["test"]["steps"]
    uses = [step["uses"].split("@")[0] for step in steps if "uses" in step]
    assert uses == [
        "actions/checkout",
        "actions/setup-python",
        "actions/cache",
        "actions/cache/restore",  # the history: the base branch's last report
        "actions/cache/restore",  # ... and a pull request's own previous attempt
        "actions/cache/restore",  # the compile cache
        "actions/cache/save",  # ... kept by the default branch's builds
        "actions/upload-artifact",
    ]
    runs = [step.get("run", "") for step in steps]
    [install] = [run for run in runs if "pip install" in run]
    # nox makes the session's venv with uv, as the README's set-up does; into an image only nox goes
    assert "python3 -m pip install 'nox[uv]'" in install
    assert 'pip install nox "$HARNESS_PACKAGE"' in install
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
    secrets = workflow(REUSABLE)["on"]["workflow_call"]["secrets"]
    (job,) = workflow(CALLER)["jobs"].values()
    assert job["uses"] == "./.github/workflows/harness.yml"
    assert set(job["with"]) <= set(inputs)
    assert set(job["secrets"]) <= set(secrets)


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
    written = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert set(written) == {"matrix", "cells", "baseline_branches"}
    expected = ["--platforms", platforms] + (["--suites", suites] if suites else [])
    assert (
        written["matrix"] + "\n" == harness(project, "ci", "matrix", "--format", "github", *expected).stdout
    )
    assert written["cells"] == written["matrix"]  # no history: no GPU-free CPU jobs, one job per cell


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


# The example caller as GitHub runs it: its `with:` expressions, evaluated for an event, become the
# reusable workflow's inputs; the matrix step's env is evaluated the same way and its script run by bash.
UPSTREAM = "vllm-project/vllm"


def github_context(event_name: str, repository: str, head: str | None = None) -> dict:
    """The ``github`` context of an event; a pull request's head repository is None once a fork is deleted."""
    event = {}
    if event_name == "pull_request":
        event = {"pull_request": {"number": 7, "head": {"repo": head and {"full_name": head}}}}
    return {
        "event_name": event_name,
        "repository": repository,
        "repository_owner": repository.split("/")[0],
        "workflow": "model tests",
        "ref": "refs/pull/7/merge" if event else "refs/heads/main",
        "event": event,
    }


def caller_inputs(github: dict) -> dict:
    inputs = {
        name: spec.get("default")
        for name, spec in workflow(REUSABLE)["on"]["workflow_call"]["inputs"].items()
    }
    (job,) = workflow(CALLER)["jobs"].values()
    return inputs | {name: evaluate(value, {"github": github}) for name, value in job["with"].items()}


def scheduled(project: Path, github: dict, inputs: dict) -> list[dict]:
    """The cells the reusable workflow's matrix job writes to $GITHUB_OUTPUT for this event and inputs."""
    step = next(step for step in workflow(REUSABLE)["jobs"]["matrix"]["steps"] if step.get("id") == "matrix")
    contexts = {"github": github, "inputs": inputs}
    env = {name: to_string(evaluate(str(value), contexts)) for name, value in step["env"].items()}
    output = project / "github_output"
    output.unlink(missing_ok=True)
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]],
        cwd=project,
        env={**os.environ, **env, "PATH": path, "GITHUB_OUTPUT": str(output)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    written = dict(line.split("=", 1) for line in output.read_text().splitlines())
    return json.loads(written["matrix"])["include"]


@pytest.mark.parametrize(
    ("event", "repository", "head", "platforms"),
    [
        ("pull_request", UPSTREAM, "someone/vllm", {"cpu"}),  # a fork's pull request
        ("pull_request", UPSTREAM, None, {"cpu"}),  # ... whose fork was deleted since
        ("pull_request", UPSTREAM, UPSTREAM, {"cuda", "rocm", "cpu"}),  # a branch of the upstream repository
        ("push", UPSTREAM, None, {"cuda", "rocm", "cpu"}),
        ("push", "someone/vllm", None, {"cpu"}),  # a fork's own push: it has no GPU runners
    ],
)
def test_the_example_caller_schedules_no_gpu_cell_for_a_pull_request_from_a_fork(
    project, event, repository, head, platforms
):
    github = github_context(event, repository, head)
    cells = scheduled(project, github, caller_inputs(github))
    assert {cell["platform"] for cell in cells} == platforms


def test_the_reusable_workflow_keeps_a_fork_off_the_gpus_whatever_the_caller_asks(project):
    github = github_context("pull_request", UPSTREAM, "someone/vllm")
    inputs = caller_inputs(github) | {"platforms": "cuda,rocm,cpu"}
    assert {cell["platform"] for cell in scheduled(project, github, inputs)} == {"cpu"}
    same_repo = github_context("pull_request", UPSTREAM, UPSTREAM)
    assert {cell["platform"] for cell in scheduled(project, same_repo, inputs)} == {"cuda", "rocm", "cpu"}


IMAGES = """
[tool.harness.ci]
model_cache = "/mnt/hf-cache"
[tool.harness.ci.images]
cuda = "vllm/vllm-openai:v0.26.0"
rocm = "rocm/vllm-ci:v0.26.0"
"""

NOX_STUB = """#!/bin/sh
# Stands in for nox: records its arguments and the token it was given.
printf '%s\\n' "$*" "$HF_TOKEN" > "$NOX_LOG"
"""


def test_a_matrix_with_images_runs_each_cell_in_its_platforms_container(project, tmp_path):
    with open(project / "pyproject.toml", "a") as file:
        file.write(IMAGES)
    done = harness(project, "ci", "matrix", "--format", "github", "--suites", "pooling")
    assert done.returncode == 0, done.stderr
    rows = {row["platform"]: row for row in json.loads(done.stdout)["include"]}
    job = workflow(REUSABLE)["jobs"]["test"]
    inputs = caller_inputs(github_context("push", UPSTREAM))
    containers = {
        platform: {key: evaluate(value, {"matrix": row}) for key, value in job["container"].items()}
        for platform, row in rows.items()
    }
    cache = ["--env", "HF_HOME=/model-cache", "--volume", "/mnt/hf-cache:/model-cache"]
    assert containers["cuda"]["image"] == "vllm/vllm-openai:v0.26.0"
    assert containers["cuda"]["options"].split() == ["--gpus", "all", "--ipc", "host", *cache]
    assert containers["rocm"]["image"] == "rocm/vllm-ci:v0.26.0"
    assert containers["rocm"]["options"].split() == [
        *("--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video", "--ipc", "host"),
        *cache,
    ]
    assert containers["cpu"] == {"image": "", "options": ""}  # an empty image: the job runs on the runner
    runs_on = {p: evaluate(job["runs-on"], {"matrix": row, "inputs": inputs}) for p, row in rows.items()}
    assert runs_on == {
        "cuda": ["self-hosted", "linux", "h100"],
        "rocm": ["self-hosted", "linux", "mi300"],
        "cpu": ["ubuntu-latest"],
    }
    steps = {step.get("name", step.get("uses", "")).split("@")[0]: step for step in job["steps"]}
    setup_python = steps["actions/setup-python"]["if"]
    assert {p: evaluate(f"${{{{ {setup_python} }}}}", {"matrix": row}) for p, row in rows.items()} == {
        "cuda": False,  # the image brings its Python and test stack
        "rocm": False,
        "cpu": True,
    }
    nox_step = next(step for name, step in steps.items() if name.startswith("nox -s"))
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "nox").write_text(NOX_STUB)
    (stub / "nox").chmod(0o755)
    for platform, row in rows.items():
        contexts = {"matrix": row, "inputs": inputs, "secrets": {"HF_TOKEN": "hf_secret"}}
        env = {name: to_string(evaluate(str(value), contexts)) for name, value in nox_step["env"].items()}
        env |= {
            "PATH": os.pathsep.join([str(stub), os.environ["PATH"]]),
            "NOX_LOG": str(tmp_path / "nox.log"),
        }
        done = subprocess.run(["bash", "-e", "-c", nox_step["run"]], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        args, token = (tmp_path / "nox.log").read_text().splitlines()
        assert args == f"-s {platform}_pooling" + ("" if platform == "cpu" else " --no-venv")
        assert token == "hf_secret"


USES = re.compile(r"^\s*(?:-\s*)?uses:\s*(\S+)(.*)$")


def test_actions_are_pinned_to_a_commit_and_checkouts_keep_no_credentials():
    for path in (REUSABLE, CALLER):
        for line in path.read_text().splitlines():
            match = USES.match(line)
            if match and not match.group(1).startswith("./"):
                assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w.-]+)?@[0-9a-f]{40}", match.group(1)), line
                assert re.fullmatch(r" # v\d+(\.\d+)*", match.group(2)), line  # the release it is
        for job in workflow(path)["jobs"].values():
            for step in job.get("steps", []):
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False


def test_hf_token_is_a_secret_never_an_input():
    call = workflow(REUSABLE)["on"]["workflow_call"]
    assert call["secrets"]["HF_TOKEN"]["required"] is False
    assert not [name for name in call["inputs"] if "token" in name.lower()]
    (job,) = workflow(CALLER)["jobs"].values()
    assert job["secrets"] == {"HF_TOKEN": "${{ secrets.HF_TOKEN }}"}


def test_a_new_push_cancels_the_pull_requests_running_jobs_but_not_mains():
    concurrency = workflow(CALLER)["concurrency"]

    def evaluated(github: dict) -> tuple:
        return tuple(
            evaluate(str(concurrency[key]), {"github": github}) for key in ("group", "cancel-in-progress")
        )

    pull_request = github_context("pull_request", UPSTREAM, UPSTREAM)
    other = github_context("pull_request", UPSTREAM, UPSTREAM)
    other["event"]["pull_request"]["number"] = 8
    assert evaluated(pull_request) == ("model tests-7", True)
    assert evaluated(other)[0] != evaluated(pull_request)[0]
    assert evaluated(github_context("push", UPSTREAM)) == ("model tests-refs/heads/main", False)


def test_the_cpu_stack_is_cached_keyed_on_pyproject_and_noxfile():
    job = workflow(REUSABLE)["jobs"]["test"]
    cache = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/cache@"))
    # the cpu_stack session's venv and the pointer to it that the sessions requiring it read
    assert cache["with"]["path"].split() == [".nox/cpu_stack", ".nox/.cache/cpu_stack.bin"]
    noxfile = (ROOT / "noxfile.py").read_text()
    assert 'CPU_STACK = "cpu_stack"' in noxfile and 'f"{CPU_STACK}.bin"' in noxfile
    assert "hashFiles('pyproject.toml', 'noxfile.py')" in cache["with"]["key"]
    assert "steps.python.outputs.python-version" in cache["with"]["key"]  # a venv holds its Python's path
    rows = [
        {"platform": "cpu", "image": ""},
        {"platform": "cpu", "image": "x"},
        {"platform": "cuda", "image": ""},
    ]
    assert [evaluate(f"${{{{ {cache['if']} }}}}", {"matrix": row}) for row in rows] == [True, False, False]


def test_the_harness_package_defaults_to_the_released_distribution_in_both_ci_systems():
    """One pin per CI system, both this project's own name (pyproject's [project]) and version."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirement = f"{project['name']}=={__version__}"
    assert workflow(REUSABLE)["on"]["workflow_call"]["inputs"]["harness-package"]["default"] == requirement
    bootstrap = yaml.safe_load((ROOT / "ci" / "buildkite" / "pipeline.yml").read_text())["steps"][0]
    assert f"pip install --quiet '{requirement}'" in bootstrap["commands"][0]


def test_the_deadline_step_gives_harness_run_the_jobs_timeout_from_now(tmp_path):
    job = workflow(REUSABLE)["jobs"]["test"]
    step = job["steps"][0]
    assert step["name"] == "Deadline for harness run"  # first, so the job's setup counts against it
    timeout = evaluate(job["timeout-minutes"], {"matrix": {"timeout_minutes": 45}})
    assert evaluate(step["env"]["TIMEOUT_MINUTES"], {"matrix": {"timeout_minutes": 45}}) == timeout
    env = {**os.environ, "TIMEOUT_MINUTES": to_string(timeout), "GITHUB_ENV": str(tmp_path / "env")}
    started = int(time.time())
    done = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    name, value = (tmp_path / "env").read_text().strip().split("=")
    assert name == CI_DEADLINE
    assert started + 45 * 60 <= int(value) <= time.time() + 45 * 60
