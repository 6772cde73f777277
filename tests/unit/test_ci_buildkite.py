"""``harness ci buildkite``: the pipeline it prints is valid Buildkite, runs, and refuses unsafe names."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.platform.packages import installed
from harness.report.publish import annotation_context

ROOT = Path(__file__).resolve().parents[2]

PYPROJECT = """
[tool.harness.suites.pooling]
paths = ["tests/models/pooling"]
[tool.harness.suites.generation]
paths = ["tests/models/generation"]
{ci}
"""


def project(tmp_path: Path, ci: str = "") -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(ci=ci))
    return tmp_path


def harness(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env or os.environ,
        timeout=120,
    )


def validate(path: Path, schema: str = "vendor.buildkite") -> subprocess.CompletedProcess:
    """check-jsonschema with the schema it ships (no network: the schema is inside the package)."""
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def generate(cwd: Path, *args: str, env: dict | None = None) -> dict:
    done = harness(cwd, "ci", "buildkite", *args, env=env)
    assert done.returncode == 0, done.stderr
    (cwd / "pipeline.yml").write_text(done.stdout)
    return yaml.safe_load(done.stdout)


def cell_steps(pipeline: dict) -> list[dict]:
    """The cells' test steps (each is followed by its baseline step, tests/unit/test_ci_baseline.py)."""
    steps = pipeline["steps"]
    assert [step["key"] for step in steps[1::2]] == [f"{step['key']}-baseline" for step in steps[::2]]
    return steps[::2]


def test_default_pipeline_is_valid_buildkite_with_a_step_per_platform_and_suite(tmp_path):
    pipeline = generate(project(tmp_path))
    checked = validate(tmp_path / "pipeline.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    steps = cell_steps(pipeline)
    assert [step["key"] for step in steps] == [
        f"{platform}-{suite}" for platform in ("cuda", "rocm", "cpu") for suite in ("pooling", "generation")
    ]
    cuda_pooling = steps[0]
    assert cuda_pooling["label"] == "cuda pooling"
    assert cuda_pooling["agents"] == {"queue": "gpu-cuda"}
    assert {step["agents"]["queue"] for step in steps} == {"gpu-cuda", "gpu-rocm", "cpu"}
    assert cuda_pooling["artifact_paths"] == ["harness-out/pooling-cuda/**/*"]
    assert cuda_pooling["timeout_in_minutes"] == 180
    assert "parallelism" not in cuda_pooling
    assert cuda_pooling["retry"]["automatic"] == [
        {"exit_status": -1, "limit": 2},
        {"exit_status": 255, "limit": 2},
        {"signal_reason": "agent_stop", "limit": 2},
    ]
    assert any(".harness-nox/bin/nox -s cuda_pooling" in command for command in cuda_pooling["commands"])
    # nox's own venv gets uv too, so the session's venv is made as the README's set-up makes it
    assert any(".harness-nox/bin/pip install --quiet 'nox[uv]'" in c for c in cuda_pooling["commands"])


def test_the_validator_rejects_a_broken_pipeline(tmp_path):
    """The schema check above can fail: a step without a usable timeout is refused."""
    pipeline = generate(project(tmp_path))
    pipeline["steps"][0]["timeout_in_minutes"] = 0
    pipeline["steps"][2]["retry"]["automatic"][0]["limit"] = 99
    (tmp_path / "pipeline.yml").write_text(yaml.safe_dump(pipeline))
    assert validate(tmp_path / "pipeline.yml").returncode == 1


def test_options_and_ci_table_choose_cells_queues_parallelism_and_prebuilt_image(tmp_path):
    ci = """
[tool.harness.ci]
prebuilt_image = true
timeout_in_minutes = 90
retry_limit = 1
parallelism = 2
[tool.harness.ci.queues]
cuda = "h100"
"""
    pipeline = generate(
        project(tmp_path, ci), "--platforms", "cuda,cpu", "--suites", "generation", "--parallelism", "4"
    )
    assert validate(tmp_path / "pipeline.yml").returncode == 0
    steps = cell_steps(pipeline)
    assert [step["key"] for step in steps] == ["cuda-generation", "cpu-generation"]
    assert [step["agents"]["queue"] for step in steps] == ["h100", "cpu"]
    assert all(step["parallelism"] == 4 for step in steps)
    assert all(step["timeout_in_minutes"] == 90 for step in steps)
    assert all(rule["limit"] == 1 for rule in steps[0]["retry"]["automatic"])
    assert steps[0]["commands"][:2] == [
        "export HARNESS_CI_DEADLINE=$$(( $$(date +%s) + 5400 ))",  # 90 minutes from the step's start
        "status=0; nox -s cuda_generation --no-venv || status=$$?",
    ]
    # a prebuilt agent, no image: the step runs on the agent, with its history and compile cache from the
    # cache only
    assert [next(iter(plugin)) for plugin in steps[0]["plugins"]] == ["cache#v1.12.0"] * 2
    assert generate(tmp_path, "--platforms", "rocm", "--suites", "pooling")["steps"][0]["parallelism"] == 2


IMAGES = """
[tool.harness.ci]
model_cache = "/mnt/hf-cache"
[tool.harness.ci.images]
cuda = "vllm/vllm-openai:v0.26.0"
rocm = "rocm/vllm-ci@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
[tool.harness.ci.env]
VLLM_WORKER_MULTIPROC_METHOD = "spawn"
"""


def test_a_platform_with_an_image_runs_its_steps_in_it_with_the_docker_plugin(tmp_path):
    pipeline = generate(project(tmp_path, IMAGES), "--suites", "pooling")
    checked = validate(tmp_path / "pipeline.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    cuda, rocm, cpu = cell_steps(pipeline)
    ((plugin, docker),) = cuda["plugins"][0].items()
    assert plugin == "docker#v5.13.0"
    common = {
        "environment": ["HF_TOKEN", "HF_HOME=/model-cache", "VLLM_WORKER_MULTIPROC_METHOD=spawn"],
        "volumes": ["/mnt/hf-cache:/model-cache"],
        "propagate-environment": True,  # BUILDKITE_PARALLEL_JOB and the build reach harness run
        "mount-buildkite-agent": True,  # buildkite-agent annotate works in the container
        "shell": ["/bin/bash", "-e", "-c"],
    }
    assert docker == {"image": "vllm/vllm-openai:v0.26.0", "gpus": "all", "ipc": "host", **common}
    assert rocm["plugins"][:1] == [
        {
            "docker#v5.13.0": {
                "image": "rocm/vllm-ci@sha256:" + "0123456789abcdef" * 4,
                "devices": ["/dev/kfd", "/dev/dri"],
                "additional-groups": ["video"],
                "ipc": "host",
                **common,
            }
        }
    ]
    assert "docker#v5.13.0" not in cpu["plugins"][0]  # no cpu image: the step builds its venvs on the agent
    version, distribution = installed(("harness",))["harness"]
    assert cuda["commands"][1:3] == [
        f"PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --quiet nox {distribution}=={version}",
        "status=0; nox -s cuda_pooling --no-venv || status=$$?",
    ]


def test_device_options_replace_the_platform_defaults(tmp_path):
    ci = (
        IMAGES
        + "[tool.harness.ci.device_options]\n"
        + 'rocm = ["--device", "/dev/kfd", "--device", "/dev/dri/renderD128"]'
    )
    pipeline = generate(project(tmp_path, ci), "--platforms", "rocm", "--suites", "pooling")
    assert validate(tmp_path / "pipeline.yml").returncode == 0
    docker = pipeline["steps"][0]["plugins"][0]["docker#v5.13.0"]
    assert docker["devices"] == ["/dev/kfd", "/dev/dri/renderD128"]
    assert "additional-groups" not in docker and "ipc" not in docker


def test_bootstrap_pipeline_is_valid_and_uploads_the_generated_one():
    path = ROOT / "ci" / "buildkite" / "pipeline.yml"
    checked = validate(path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    commands = " ; ".join(yaml.safe_load(path.read_text())["steps"][0]["commands"])
    assert "harness ci buildkite --history-step | buildkite-agent pipeline upload" in commands
    assert "pipefail" in commands


def test_the_history_step_restores_each_cells_report_before_the_pipeline_is_made(tmp_path):
    """The bootstrap's upload: one step that restores every cell's last merged report from the cache its
    merge step keeps, then makes the pipeline with that history."""
    out = tmp_path / "history.yml"
    made = subprocess.run(
        [sys.executable, "-m", "harness", "ci", "buildkite", "--history-step"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    out.write_text(made.stdout)
    assert validate(out).returncode == 0
    [step] = yaml.safe_load(made.stdout)["steps"]
    restored = [plugin["cache#v1.12.0"]["path"] for plugin in step["plugins"]]
    assert "harness-baseline/pooling-cuda" in restored
    assert "--history harness-baseline | buildkite-agent pipeline upload" in " ; ".join(step["commands"])


def interpolate(command: str) -> str:
    """What ``buildkite-agent pipeline upload`` does to the text we print: ``$$`` becomes ``$``."""
    assert "$" not in command.replace("$$", ""), f"an unescaped $ would be interpolated at upload: {command}"
    return command.replace("$$", "$")


NOXFILE = """
import os, pathlib
import nox

@nox.session(name="cpu_pooling")
def cpu_pooling(session):
    pathlib.Path("deadline.txt").write_text(os.environ["HARNESS_CI_DEADLINE"])
    if os.environ.get("WRITE_SUMMARY"):
        pathlib.Path("harness-out/pooling-cpu-1of2").mkdir(parents=True, exist_ok=True)
        pathlib.Path("harness-out/pooling-cpu-1of2/summary.md").write_text("# summary")
    session.run("python", "-c", "import sys; sys.exit(int(sys.argv[1]))", os.environ["EXIT"])
"""

AGENT = """#!/bin/sh
# Stands in for buildkite-agent (a Go binary this machine lacks): records its arguments and stdin.
printf '%s\\n' "$@" > "$AGENT_LOG"
cat >> "$AGENT_LOG"
"""


@pytest.mark.parametrize(("exit_code", "write_summary"), [(0, True), (3, True), (3, False)])
def test_generated_commands_run_the_nox_session_and_keep_its_exit_status(tmp_path, exit_code, write_summary):
    """The step's commands, interpolated as Buildkite does, run by bash -e like an agent, with real nox."""
    pipeline = generate(
        project(tmp_path, "[tool.harness.ci]\nprebuilt_image = true"),
        "--platforms",
        "cpu",
        "--suites",
        "pooling",
        "--parallelism",
        "2",
    )
    (tmp_path / "noxfile.py").write_text(NOXFILE)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "buildkite-agent").write_text(AGENT)
    (bin_dir / "buildkite-agent").chmod(0o755)
    script = "\n".join(interpolate(command) for command in pipeline["steps"][0]["commands"])
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]]),
        "AGENT_LOG": str(tmp_path / "agent.log"),
        "BUILDKITE_PARALLEL_JOB": "1",
        "EXIT": str(exit_code),
        "WRITE_SUMMARY": "1" if write_summary else "",
    }
    started = time.time()
    done = subprocess.run(
        ["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == (1 if exit_code else 0), done.stdout + done.stderr  # nox's status, kept
    assert "Running session cpu_pooling" in done.stderr
    # harness run gets the job's end: the step's timeout_in_minutes from when its commands started
    deadline = float((tmp_path / "deadline.txt").read_text())
    assert int(started) + 180 * 60 <= deadline <= time.time() + 180 * 60
    log = tmp_path / "agent.log"
    if write_summary:
        assert not log.exists()  # harness run annotates with its summary itself
    else:
        lines = log.read_text().splitlines()
        # the context harness run itself annotates with, so a retried job's summary replaces this line
        assert lines[:5] == [
            "annotate",
            "--style",
            "error",
            "--context",
            annotation_context("pooling", "cpu", "1/2"),
        ]
        assert lines[4] == "harness-pooling-cpu-1of2"
        assert lines[5] == "nox -s cpu_pooling --no-venv exited 1 before the harness wrote " + (
            "harness-out/pooling-cpu-1of2/summary.md"
        )


BAD_NAMES = ["it's", "a$b", "a b", "a\nb", "$(reboot)", "-rf", "a;b", "a.b", ""]


@pytest.mark.parametrize("name", BAD_NAMES)
@pytest.mark.parametrize("command", [["ci", "buildkite"], ["ci", "matrix"]])
def test_an_unsafe_suite_name_on_the_command_line_is_one_line_exit_2(tmp_path, command, name):
    done = harness(project(tmp_path), *command, "--suites", f"pooling,{name}")
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("harness: error: ")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("ci", "says"),
    [
        ('[tool.harness.ci.queues]\ncuda = "gpu $(id)"', "cuda queue name"),
        ('[tool.harness.ci.queues]\ncuda = "it\'s"', "cuda queue name"),
        ('[tool.harness.ci.queues]\nmetal = "m1"', "[tool.harness.ci.queues] metal: unknown key"),
        ('[tool.harness.ci]\nsuites = ["pooling\\nrm"]', "suite name"),
        ('[tool.harness.ci]\nplatforms = ["tpu"]', "'tpu'"),
        (
            "[tool.harness.ci]\nparallelism = 0",
            "[tool.harness.ci] parallelism: expected an integer between 1 and 1024, got 0",
        ),
        (
            '[tool.harness.ci]\nparallelism = "2"',
            "parallelism: expected an integer between 1 and 1024, got '2'",
        ),
        ("[tool.harness.ci]\nprebuilt = true", "[tool.harness.ci] prebuilt: unknown key"),
        ("[tool.harness.ci]\nretry_limit = 11", "retry_limit: expected an integer between 0 and 10, got 11"),
        ("[tool.harness.ci.queues]\ncuda = 3", "[tool.harness.ci] queues: expected a table of strings"),
        ('[tool.harness.suites."po oling"]', "suite name 'po oling'"),
        (
            '[tool.harness.suites.x]\npaths = ["t"]\nphases = [{name = "a$b"}]',
            "[tool.harness.suites.x] phases[0] name: expected letters",
        ),
        (
            '[tool.harness.suites.x]\npaths = ["t"]\nphases = [{name = "a b"}]',
            "name: expected letters, digits",
        ),
        ("[tool.harness.suites.x]\nmarkers = 'gpu'", "[tool.harness.suites.x] markers: unknown key"),
        ('[tool.harness.ci.images]\nmetal = "m1"', "[tool.harness.ci.images] metal: unknown key"),
        ('[tool.harness.ci.images]\ncuda = "vllm $(id)"', "[tool.harness.ci.images] cuda"),
        ('[tool.harness.ci.images]\ncuda = "-v/:/host"', "[tool.harness.ci.images] cuda"),
        (
            '[tool.harness.ci.device_options]\ncuda = ["--gpus"]',
            "[tool.harness.ci.device_options] cuda: expected flag, value pairs",
        ),
        (
            '[tool.harness.ci.device_options]\ncuda = ["--privileged", "true"]',
            "expected flag, value pairs with flags from --gpus",
        ),
        (
            '[tool.harness.ci.device_options]\ncuda = ["--gpus", "all --privileged"]',
            "[tool.harness.ci.device_options] cuda: expected letters",
        ),
        ('[tool.harness.ci.env]\n"A B" = "1"', "expected environment variable names, got 'A B'"),
        ('[tool.harness.ci.env]\nHF_HOME = "$HOME"', "[tool.harness.ci.env] HF_HOME"),
        ('[tool.harness.ci]\nmodel_cache = "cache"', "model_cache: expected an absolute path"),
        ('[tool.harness.ci]\nmodel_cache = "/a:/etc"', "model_cache: expected an absolute path"),
    ],
)
def test_a_bad_ci_table_is_one_line_exit_2_naming_the_key(tmp_path, ci, says):
    done = harness(project(tmp_path, ci), "ci", "buildkite")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert says in done.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--platforms", "cuda,tpu"], "platform 'tpu' is not one of cuda, rocm, xpu, cpu"),
        (["--suites", "pooling,nope"], "suite 'nope' is not in [tool.harness.suites]"),
        (["--parallelism", "0"], "--parallelism: expected an integer between 1 and 1024, got 0"),
        (["--platforms", "cuda,,rocm"], "empty name"),
    ],
)
def test_bad_options_are_one_line_exit_2(tmp_path, args, says):
    done = harness(project(tmp_path), "ci", "buildkite", *args)
    assert done.returncode == 2
    assert says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_without_any_suite_it_says_where_to_define_them(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    done = harness(tmp_path, "ci", "buildkite")
    assert done.returncode == 2
    assert "[tool.harness.suites.<name>]" in done.stderr
