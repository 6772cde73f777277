"""Generated CI that its own tool accepts, and what a pull request may widen (issue 50, items 5 and 7).

Every value ``harness ci`` writes (a parallelism, a gate, a timeout) goes back through the harness's own
parsers: the generated ``harness merge`` line through the real CLI parser, each shard job's Buildkite
variables through ``harness run``'s shard parser, the exported deadline through the shell and the settings'
reader. A ``[tool.harness.ci]`` value the generated jobs would refuse is refused when the CI file is made.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import cli
from harness.ci import buildkite
from harness.ci.matrix import MOST_MINUTES, cells, load
from harness.config.settings import CI_DEADLINE, ci_deadline
from harness.errors import HarnessError
from harness.report.baseline import refuse_itself
from harness.report.compare import Gate
from harness.run.shards import parse_shard
from harness.split import MAX_SHARDS

SUITES = '[tool.harness.suites.pooling]\npaths = ["tests"]\n'
PULL_REQUEST = {
    "BUILDKITE_BRANCH": "feature",
    "BUILDKITE_PULL_REQUEST": "7",
    "BUILDKITE_PULL_REQUEST_BASE_BRANCH": "main",
    "BUILDKITE_PIPELINE_DEFAULT_BRANCH": "main",
}


def _project(root: Path, ci: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(f"{SUITES}[tool.harness.ci]\n{ci}\n")
    return root / "pyproject.toml"


def _percent(value: Decimal) -> str:
    return format(value.normalize(), "f")


GATES = st.lists(
    st.one_of(
        st.just("starts"),
        st.just("wall"),
        st.decimals(0, 10**9, places=6, allow_nan=False).map(lambda d: f"wall:{_percent(d)}%"),
        st.floats(0, 1e9, allow_nan=False).map(lambda f: f"wall:{_percent(Decimal(repr(f)))}%"),
    ),
    max_size=3,
    unique=True,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parallelism=st.integers(1, MAX_SHARDS),
    minutes=st.integers(1, MOST_MINUTES),
    retries=st.integers(0, 10),
    gates=GATES,
)
def test_every_value_the_pipeline_writes_parses_back(tmp_path_factory, parallelism, minutes, retries, gates):
    root = tmp_path_factory.mktemp("p")
    ci = (
        f"parallelism = {parallelism}\ntimeout_in_minutes = {minutes}\nretry_limit = {retries}\n"
        f"fail_on_regression = {json.dumps(gates)}\nplatforms = ['cpu']\n"
    )
    ci_settings, suites = load(_project(root, ci))
    selected = cells(ci_settings, suites, None, None)
    pipeline = yaml.safe_load(
        yaml.safe_dump(buildkite.pipeline(selected, ci_settings, parallelism, PULL_REQUEST), sort_keys=False)
    )
    test, merge = pipeline["steps"]
    assert test["timeout_in_minutes"] == minutes and test.get("parallelism", 1) == parallelism
    for job in {0, parallelism - 1}:  # each job's shard, as harness run reads Buildkite's variables
        env = {"BUILDKITE_PARALLEL_JOB": str(job), "BUILDKITE_PARALLEL_JOB_COUNT": str(parallelism)}
        assert parse_shard(None, env) is not None
    _deadline_parses(test["commands"][0], minutes)
    args = _merge_arguments(merge["commands"][-1], parallelism)
    assert [Gate.parse(spec) for spec in args.fail_on_regression] == [Gate.parse(g) for g in gates]
    refuse_itself(args.out, args.baseline)  # the generated --out never overlaps the baseline
    for rule in merge["retry"]["automatic"]:
        assert 0 <= rule["limit"] <= 10


def _deadline_parses(command: str, minutes: int) -> None:
    """The exported deadline, run by a shell as the agent runs it (Buildkite's ``$$`` is ``$``), then read
    by the settings as ``harness run`` reads it."""
    shell = command.replace("$$", "$") + f'; printf %s "${CI_DEADLINE}"'
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True)
    deadline = ci_deadline({CI_DEADLINE: done.stdout})
    assert deadline is not None and deadline >= minutes * 60


def _merge_arguments(command: str, parallelism: int):
    """The generated ``harness merge`` line through the real CLI parser, its shard glob as the shell
    would expand it."""
    words = shlex.split(command.replace("$$", "$"))
    assert words[0].endswith("harness") and words[1] == "merge"
    expanded = [w for word in words[2:] for w in _expand(word, parallelism)]
    args = cli._parser().parse_args(["merge", *expanded])
    assert args.module == "harness.report.merge" and len(args.shards) == parallelism
    return args


def _expand(word: str, parallelism: int) -> list[str]:
    if "*" not in word:
        return [word]
    return [word.replace("*", str(i)) for i in range(parallelism)]


def test_the_github_matrix_gates_parse_as_the_compare_job_passes_them(tmp_path, monkeypatch, capsys):
    _project(tmp_path, 'fail_on_regression = ["starts", "wall:1000000%", "wall:0.5%"]\nplatforms = ["cpu"]')
    monkeypatch.chdir(tmp_path)
    assert cli.main(["ci", "matrix"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["include"]
    # harness.yml: for gate in $GATES; do args+=(--fail-on-regression "$gate"); done
    argv = ["merge", "r", "--out", "o", "--baseline", "b"]
    for gate in row["fail_on_regression"].split():
        argv += ["--fail-on-regression", gate]
    parsed = cli._parser().parse_args(argv)
    assert [Gate.parse(g).spec for g in parsed.fail_on_regression] == ["starts", "wall:1000000%", "wall:0.5%"]


@pytest.mark.parametrize(
    "ci",
    [
        f"parallelism = {MAX_SHARDS + 1}",
        "parallelism = 100000000",
        "timeout_in_minutes = 100000000000",
        f"timeout_in_minutes = {MOST_MINUTES + 1}",
        'fail_on_regression = ["wall:1e6%"]',
        'fail_on_regression = ["wall:10000000000%"]',
        f'fail_on_regression = ["wall:{"9" * 400}%"]',
    ],
)
def test_a_value_the_generated_jobs_would_refuse_is_refused_when_the_ci_file_is_made(
    tmp_path, monkeypatch, ci
):
    """The old generator wrote parallelism 5000 (every job then refused --shard) and a 1e6 % gate as
    ``wall:1e+06%`` (which its own parser refuses)."""
    _project(tmp_path, ci)
    monkeypatch.chdir(tmp_path)
    for argv in (["ci", "buildkite"], ["ci", "matrix"]):
        assert cli.main(argv) == 2


@pytest.mark.parametrize("given", ["0", str(MAX_SHARDS + 1), "5000"])
def test_the_parallelism_option_has_the_settings_bounds(tmp_path, monkeypatch, given):
    _project(tmp_path, "")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["ci", "buildkite", "--parallelism", given]) == 2


@settings(max_examples=200)
@given(st.floats(0, 1e9, allow_nan=False) | st.integers(0, 10**9))
def test_a_gate_written_back_reads_as_the_same_gate(percent):
    gate = Gate("wall", float(percent))
    assert Gate.parse(gate.spec) == gate and "e" not in gate.spec


# --- what a pull request may widen ---------------------------------------------------------------------

MOUNTS_REFUSED = [
    "/", "/etc", "/etc/ssl", "/root", "/root/.cache", "/var/run/docker.sock", "/var/run", "/run/docker.sock",
    "/var", "/proc", "/proc/1", "/sys", "/dev", "/dev/shm", "/home", "/home/agent/.ssh", "/usr", "/usr/local",
    "/boot", "/var/lib/docker", "/var/lib/buildkite-agent/builds", "/etc/buildkite-agent", "/mnt/../etc",
    "/mnt/./models", "//etc", "/mnt/models/", "/opt", "/var/lib", "relative/path", "~/models",
]  # fmt: skip
MOUNTS_ALLOWED = [
    "/mnt/models",
    "/data/hf",
    "/opt/models",
    "/var/cache/huggingface",
    "/srv/hf-cache",
    "/scratch",
]


@pytest.mark.parametrize("path", MOUNTS_REFUSED)
def test_a_model_cache_that_would_mount_a_system_directory_is_refused(tmp_path, monkeypatch, path):
    _project(tmp_path, f"model_cache = {json.dumps(path)}\nimages = {{ cuda = 'vllm/vllm-openai:v0.32.0' }}")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["ci", "buildkite"]) == 2
    assert cli.main(["ci", "matrix"]) == 2


@pytest.mark.parametrize("path", MOUNTS_ALLOWED)
def test_a_model_cache_of_its_own_is_mounted(tmp_path, monkeypatch, capsys, path):
    _project(tmp_path, f"model_cache = {json.dumps(path)}\nimages = {{ cuda = 'vllm/vllm-openai:v0.32.0' }}")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["ci", "buildkite", "--platforms", "cuda"]) == 0
    assert f"{path}:/model-cache" in capsys.readouterr().out


@pytest.mark.parametrize(
    "flags",
    [
        ["--device", "/dev/sda"],
        ["--device", "/dev/mem"],
        ["--device", "/dev/dri/../sda"],
        ["--device", "/dev/kfd/../../etc/passwd"],
        ["--runtime", "sysbox-runc"],
    ],
)
def test_device_flags_past_the_gpus_are_refused(tmp_path, monkeypatch, flags):
    _project(tmp_path, f"device_options = {{ cuda = {json.dumps(flags)} }}")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["ci", "buildkite"]) == 2


def test_ci_settings_come_from_the_base_branch_when_asked(tmp_path, monkeypatch, capsys):
    """``--ci-settings``: the pull request's own [tool.harness.ci] (its queue, its mount) is not used."""
    base = _project(
        tmp_path / "base", "images = { cuda = 'vllm/vllm-openai:v0.32.0' }\nqueues = { cuda = 'gpu' }"
    )
    _project(
        tmp_path / "pr",
        "images = { cuda = 'evil/image:latest' }\nqueues = { cuda = 'deploy' }\nmodel_cache = '/mnt/models'\n"
        "env = { EXTRA = '1' }",
    )
    monkeypatch.chdir(tmp_path / "pr")
    assert cli.main(["ci", "buildkite", "--platforms", "cuda", "--ci-settings", str(base)]) == 0
    printed = capsys.readouterr().out
    assert "vllm/vllm-openai:v0.32.0" in printed and "queue: gpu" in printed
    assert not re.search(r"evil|deploy|model-cache|EXTRA", printed), printed
    assert cli.main(["ci", "matrix", "--ci-settings", str(tmp_path / "missing.toml")]) == 2


def test_the_generated_merge_refuses_nothing_of_its_own(tmp_path):
    """A sanity bound on the helpers above: a refusing parser is seen as refusing."""
    with pytest.raises(HarnessError):
        refuse_itself("harness-baseline/x", "harness-baseline/x")
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["merge", "--out", "o"])


def test_every_platform_has_its_ci_facts_in_one_place():
    """Queues and device flags per platform come from ``harness.platform.jobs``, one line per platform."""
    from harness.platform import PLATFORMS
    from harness.platform.jobs import DEFAULT_CELLS, DEVICE_OPTIONS, QUEUES

    assert set(QUEUES) == set(DEVICE_OPTIONS) == set(PLATFORMS) and set(DEFAULT_CELLS) <= set(PLATFORMS)
    assert cli._parser()._subparsers is not None
    run = next(
        a for a in cli._parser()._subparsers._group_actions[0].choices["run"]._actions if a.dest == "platform"
    )
    assert tuple(run.choices) == PLATFORMS
