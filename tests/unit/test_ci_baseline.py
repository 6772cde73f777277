"""Every CI build compared with its base branch by itself: the step (Buildkite) and job (GitHub) after a
suite's tests, run as the CI would run them, with the real `harness` command, over the real reports of
docs/runs/ (the naive pooling suite as the base branch's build, the shipped one as the pull request's,
each cut into two shard reports by test, as tests/unit/test_merge.py cuts them).

Stand-ins only for what this machine lacks: `buildkite-agent` (a Go binary: its artifact download and
annotate, with their arguments) and the stores themselves (the cache plugin's and actions/cache's restore
and save are copies of the path they are given).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.actions_expressions import evaluate, to_string
from tests.unit.test_ci_buildkite import generate, interpolate, project, validate
from tests.unit.test_ci_github import REUSABLE, workflow
from tests.unit.test_merge import shards

BIN = Path(sys.executable).parent  # where the harness command is installed
AGENT = f"""#!{sys.executable}
# Stands in for buildkite-agent: `artifact download QUERY DEST --step KEY` copies what matches QUERY
# under $ARTIFACTS/KEY (the step's uploaded files, by path), `annotate` records its arguments and text.
import glob, os, shutil, sys
args = sys.argv[1:]
if args[:2] == ["artifact", "download"]:
    query, dest, step = args[2], args[3], args[args.index("--step") + 1]
    root = os.path.join(os.environ["ARTIFACTS"], step)
    found = glob.glob(os.path.join(root, query))
    if not found:
        sys.exit("no artifacts found for " + query)
    for path in found:
        target = os.path.join(dest, os.path.relpath(path, root))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy(path, target)
elif args[0] == "annotate":
    with open(os.environ["AGENT_LOG"], "a") as log:
        log.write(" ".join(args) + "\\n" + sys.stdin.read())
"""

PR_BUILD = {
    "BUILDKITE_BRANCH": "fewer-starts",
    "BUILDKITE_PULL_REQUEST": "52570",
    "BUILDKITE_PULL_REQUEST_BASE_BRANCH": "main",
    "BUILDKITE_PIPELINE_DEFAULT_BRANCH": "main",
}
MAIN_BUILD = {**PR_BUILD, "BUILDKITE_BRANCH": "main", "BUILDKITE_PULL_REQUEST": "false"}
CI = '[tool.harness.ci]\nprebuilt_image = true\nplatforms = ["cpu"]\nsuites = ["pooling"]\n'


def buildkite_step(cwd: Path, build: dict, ci: str = "") -> dict:
    """The cell's baseline step as `harness ci buildkite` prints it inside ``build``."""
    pipeline = generate(project(cwd, CI + ci), "--parallelism", "2", env={**os.environ, **build})
    checked = validate(cwd / "pipeline.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    test, step = pipeline["steps"]
    assert step["depends_on"] == test["key"] and step["allow_dependency_failure"] is True
    return step


def run_step(cwd: Path, step: dict, reports: list[str]) -> subprocess.CompletedProcess:
    """The step's commands under bash -e, the test step's shard reports uploaded as its jobs would."""
    artifacts = cwd / "artifacts" / step["depends_on"]
    shutil.rmtree(artifacts, ignore_errors=True)
    for index, report in enumerate(reports):
        run_dir = artifacts / "harness-out" / f"pooling-cpu-{index}of2"
        run_dir.mkdir(parents=True)
        shutil.copy(report, run_dir / "report.json")
    bin_dir = cwd / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "buildkite-agent").write_text(AGENT)
    (bin_dir / "buildkite-agent").chmod(0o755)
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(bin_dir), str(BIN), os.environ["PATH"]]),
        "ARTIFACTS": str(cwd / "artifacts"),
        "AGENT_LOG": str(cwd / "agent.log"),
        "BUILDKITE": "true",
    }
    script = "\n".join(interpolate(command) for command in step["commands"])
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=env, capture_output=True, text=True)


def test_buildkite_main_keeps_the_baseline_and_a_pull_request_compares_with_it(tmp_path):
    base, pr = shards("pooling-naive-cpu", tmp_path), shards("pooling-cpu", tmp_path)
    main, request = tmp_path / "main", tmp_path / "request"
    main.mkdir(), request.mkdir()

    keep = buildkite_step(main, MAIN_BUILD)
    ((plugin, cache),) = keep["plugins"][0].items()
    assert plugin.startswith("cache#v")
    assert cache == {
        "path": "harness-baseline/pooling-cpu",
        "save": "pipeline",
        "force": True,  # each build of main replaces the last one's
        "key-extra": "cpu-pooling@main",
        "backend": "s3",
        "soft-fail": True,
    }
    done = run_step(main, keep, base)
    assert done.returncode == 0, done.stdout + done.stderr
    kept = json.loads((main / cache["path"] / "report.json").read_text())
    assert kept["starts"]["total"]["by_kind"] == {"vllm": 10, "hf": 3}

    compare = buildkite_step(request, PR_BUILD, 'fail_on_regression = ["starts"]\n')
    restore = compare["plugins"][0][plugin]
    assert "save" not in restore
    assert (restore["path"], restore["key-extra"], restore["restore"]) == (
        cache["path"],  # the plugin's key holds the path: restore reads what save wrote
        "cpu-pooling@main",  # the pull request's base branch
        "pipeline",
    )
    shutil.copytree(main / cache["path"], request / restore["path"])  # the plugin's restore
    done = run_step(request, compare, pr)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = (request / "harness-compare" / "pooling-cpu" / "summary.md").read_text()
    suite = next(line for line in summary.splitlines() if line.startswith("| suite |"))
    assert "| suite | 10 → 3 (−7) | 3 → 2 (−1) |" in suite
    assert "| `examples/pooling_naive/test_embedding_naive.py` (removed) | 10 → — | 3 → — |" in summary
    annotation = (request / "agent.log").read_text()
    # one annotation for the suite (its findings make it a warning), under the unsharded run's context
    assert annotation.startswith("annotate --style warning --context harness-pooling-cpu\n")
    assert annotation.count("annotate --style") == 1
    assert "## Before → after" in annotation
    assert compare["artifact_paths"] == ["harness-compare/pooling-cpu/*"]

    # the gate: a pull request that starts more than its base fails the step, naming the file
    shutil.rmtree(request / restore["path"])
    shutil.copytree(request / "harness-compare" / "pooling-cpu", request / restore["path"])
    done = run_step(request, compare, base)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "examples/pooling_naive/test_embedding_naive.py: vLLM starts — → 10" in done.stderr


def test_buildkite_without_a_baseline_yet_says_so_in_one_line_and_passes(tmp_path):
    step = buildkite_step(tmp_path, PR_BUILD, 'fail_on_regression = ["starts"]\n')
    done = run_step(tmp_path, step, shards("pooling-cpu", tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr  # the cache plugin found nothing
    summary = (tmp_path / "harness-compare" / "pooling-cpu" / "summary.md").read_text()
    assert "no baseline at harness-baseline/pooling-cpu yet" in summary


def test_buildkite_a_shard_without_a_report_is_one_line_and_exit_2(tmp_path):
    step = buildkite_step(tmp_path, PR_BUILD)
    done = run_step(tmp_path, step, shards("pooling-cpu", tmp_path)[:1])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "harness: error: shard 1/2 of 2 missing: its job left no report to merge"
    )


@pytest.mark.parametrize(
    ("build", "keeps", "branch"),
    [
        (MAIN_BUILD, True, "main"),
        (PR_BUILD, False, "main"),
        ({**PR_BUILD, "BUILDKITE_PULL_REQUEST_BASE_BRANCH": "release/v1"}, False, "release/v1"),
        ({**PR_BUILD, "BUILDKITE_PULL_REQUEST_BASE_BRANCH": "someone-elses"}, False, "main"),
        ({**MAIN_BUILD, "BUILDKITE_BRANCH": "release/v1"}, True, "release/v1"),
        ({**MAIN_BUILD, "BUILDKITE_BRANCH": "feature"}, False, "main"),  # a push, not a kept branch
        ({**MAIN_BUILD, "BUILDKITE_BRANCH": "a$b"}, False, "main"),
        ({}, False, "${BUILDKITE_PIPELINE_DEFAULT_BRANCH}"),  # printed outside a build: upload fills it
    ],
    ids=[
        "main",
        "pull request",
        "into a kept branch",
        "into another",
        "kept branch",
        "push",
        "dollar",
        "none",
    ],
)
def test_buildkite_which_builds_keep_and_which_baseline_the_others_read(tmp_path, build, keeps, branch):
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUILDKITE")}
    pipeline = generate(project(tmp_path, CI + 'baseline_branches = ["release/v1"]\n'), env={**env, **build})
    cache = pipeline["steps"][1]["plugins"][0]["cache#v1.12.0"]
    assert ("save" in cache, "restore" in cache) == (keeps, not keeps)
    assert cache["key-extra"] == f"cpu-pooling@{branch}"


# GitHub: the compare job's script, its env evaluated for the event, harness-artifacts/ laid out as
# actions/download-artifact lays out the test job's artifacts (one folder per artifact name).


def compare_job() -> dict:
    return workflow(REUSABLE)["jobs"]["compare"]


def keeps(event: str, ref_name: str, branches: list[str]) -> str:
    github = {
        "event_name": event,
        "ref_name": ref_name,
        "event": {"repository": {"default_branch": "main"}},
    }
    value = evaluate(
        compare_job()["env"]["KEEPS"], {"github": github, "matrix": {"baseline_branches": branches}}
    )
    return to_string(value)


def test_github_pushes_to_the_default_or_a_named_branch_keep_the_baseline():
    assert keeps("push", "main", []) == "true"
    assert keeps("push", "release/v1", ["release/v1"]) == "true"
    assert keeps("push", "feature", ["release/v1"]) == "false"
    assert keeps("pull_request", "52570/merge", ["52570/merge"]) == "false"


def run_job(cwd: Path, artifacts: dict[str, str], keep: bool, gates: str = "") -> subprocess.CompletedProcess:
    job = compare_job()
    step = next(step for step in job["steps"] if step.get("name") == "Before -> after")
    for name, report in artifacts.items():
        (cwd / "harness-artifacts" / name).mkdir(parents=True)
        shutil.copy(report, cwd / "harness-artifacts" / name / "report.json")
    matrix = {
        "suite": "pooling",
        "platform": "cpu",
        "artifact": "harness-cpu-pooling",
        "fail_on_regression": gates,
    }
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(BIN), os.environ["PATH"]]),
        "GITHUB_STEP_SUMMARY": str(cwd / "step-summary.md"),
        "KEEPS": "true" if keep else "false",
        "BASELINE": evaluate(job["env"]["BASELINE"], {"matrix": matrix}),
        **{name: to_string(evaluate(value, {"matrix": matrix})) for name, value in step["env"].items()},
    }
    return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=cwd, env=env, capture_output=True, text=True)


def whole(report: str, tmp_path: Path, name: str) -> str:
    """One unsharded report (a GitHub cell is one job): the shards merged."""
    path = tmp_path / name
    first, second = shards(report, tmp_path)
    done = subprocess.run(
        [str(BIN / "harness"), "merge", first, second, "--out", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return str(path / "report.json")


def test_github_main_keeps_its_report_and_a_pull_request_compares_with_it(tmp_path):
    base, pr = whole("pooling-naive-cpu", tmp_path, "base"), whole("pooling-cpu", tmp_path, "pr")
    main, request = tmp_path / "main", tmp_path / "request"
    main.mkdir(), request.mkdir()
    # a re-run: attempt 2 is the newest run directory and the one merged
    done = run_job(
        main, {"harness-cpu-pooling-attempt-2": base, "harness-cpu-pooling-attempt-1": pr}, keep=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    job = compare_job()
    restore = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/cache/restore@"))
    save = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/cache/save@"))
    assert restore["with"]["path"] == save["with"]["path"] == "${{ env.BASELINE }}"  # one cache version
    assert (restore["if"], save["if"]) == ("env.KEEPS != 'true'", "env.KEEPS == 'true'")
    kept = main / "harness-baseline" / "pooling-cpu"
    assert json.loads((kept / "report.json").read_text())["starts"]["total"]["by_kind"] == {
        "vllm": 10,
        "hf": 3,
    }

    shutil.copytree(kept, request / "harness-baseline" / "pooling-cpu")  # actions/cache/restore
    done = run_job(request, {"harness-cpu-pooling-attempt-1": pr}, keep=False, gates="starts")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = (request / "step-summary.md").read_text()
    assert "## Before → after" in summary and "10 → 3 (−7)" in summary

    reverse = tmp_path / "reverse"
    reverse.mkdir()
    shutil.copytree(request / "harness-compare" / "pooling-cpu", reverse / "harness-baseline" / "pooling-cpu")
    done = run_job(reverse, {"harness-cpu-pooling-attempt-1": base}, keep=False, gates="starts")
    assert done.returncode == 1
    assert "harness: regression: runner starts rose" in done.stderr


def test_github_without_the_test_jobs_artifact_the_summary_says_so(tmp_path):
    (tmp_path / "harness-artifacts").mkdir()
    done = run_job(tmp_path, {}, keep=False)
    assert done.returncode == 0, done.stderr
    assert (
        "No run directory from the test job (harness-cpu-pooling)"
        in (tmp_path / "step-summary.md").read_text()
    )


def test_the_generated_files_and_the_workflow_leave_the_gate_off_until_set(tmp_path):
    step = buildkite_step(tmp_path, PR_BUILD)
    assert "--fail-on-regression" not in step["commands"][-1]
    matrix = yaml.safe_load(
        subprocess.run(
            [str(BIN / "harness"), "ci", "matrix", "--format", "json"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        ).stdout
    )
    assert [cell["fail_on_regression"] for cell in matrix] == [""]


def test_github_compares_after_every_cell_even_failed_ones_on_the_cpu_runners():
    job = compare_job()
    assert job["needs"] == ["matrix", "test"]
    assert job["if"] == "${{ always() && needs.matrix.result == 'success' }}"
    # one per cell: the matrix job's cells (no GPU-free CPU rows, whose reports the cell's job keeps)
    assert job["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.cells) }}"
    inputs = {"cpu-runs-on": '["self-hosted", "linux", "cpu-pool"]'}
    assert evaluate(job["runs-on"], {"inputs": inputs}) == ["self-hosted", "linux", "cpu-pool"]
