"""Backs docs/ci.md § The base branch's starts: a pull request compared with its base branch by the
generated Buildkite steps, on real CPU engines. Two copies of this tree, the base branch's with the naive
pooling example as its `pooling` suite and the pull request's with the shipped one, each run as two shards
(`harness run` with Buildkite's parallel-job variables, as the generated step runs it), then each copy's
`<cell>-baseline` step as `harness ci buildkite` prints it inside a build of `main` and of a pull request
into `main`. The artifact download is skipped (the shards' run directories are already where it puts
them) and the cache plugin's save and restore are a copy of its path between the two copies.

    python benchmarks/ci_baseline.py --work /tmp/cib
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BUILDS = {
    "base": {"BUILDKITE_BRANCH": "main", "BUILDKITE_PULL_REQUEST": "false"},
    "pr": {
        "BUILDKITE_BRANCH": "fewer-starts",
        "BUILDKITE_PULL_REQUEST": "1",
        "BUILDKITE_PULL_REQUEST_BASE_BRANCH": "main",
    },
}
CI = (
    '\n[tool.harness.ci]\nprebuilt_image = true\nplatforms = ["cpu"]\nsuites = ["pooling"]\nparallelism = 2\n'
)


def checkout(work: Path, name: str) -> Path:
    """This tree's tracked files; the base branch's `pooling` suite is the naive example."""
    tree = work / name
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    start = text.index("[tool.harness.ci]")
    text = text[:start] + text[text.index("\n[", start + 1) + 1 :] + CI  # this run's cells only
    if name == "base":
        text = text.replace('paths = ["tests/models/pooling"]', 'paths = ["examples/pooling_naive"]', 1)
    pyproject.write_text(text)
    return tree


def run_shards(tree: Path) -> float:
    started = time.monotonic()
    for index in range(2):
        env = {**os.environ, "BUILDKITE_PARALLEL_JOB": str(index), "BUILDKITE_PARALLEL_JOB_COUNT": "2"}
        done = subprocess.run(
            [sys.executable, "-m", "harness", "run", "pooling", "--platform", "cpu"], cwd=tree, env=env
        )
        print(f"{tree.name} shard {index}/2: exit {done.returncode}", flush=True)
    return time.monotonic() - started


def baseline_step(tree: Path, name: str) -> int:
    env = {**os.environ, **BUILDS[name], "BUILDKITE_PIPELINE_DEFAULT_BRANCH": "main"}
    printed = subprocess.run(
        [sys.executable, "-m", "harness", "ci", "buildkite"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    step = yaml.safe_load(printed.stdout)["steps"][1]
    commands = [c.replace("$$", "$") for c in step["commands"] if not c.startswith("buildkite-agent ")]
    script = "\n".join(c.replace("harness merge", f"{sys.executable} -m harness merge", 1) for c in commands)
    print(f"{name}: {step['label']}\n  {script}", flush=True)
    return subprocess.run(["bash", "-e", "-c", script], cwd=tree, env=env).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    trees = {name: checkout(args.work, name) for name in BUILDS}
    for name, tree in trees.items():
        print(f"{name}: two shards in {run_shards(tree):.0f} s", flush=True)
    print(f"base: baseline step exit {baseline_step(trees['base'], 'base')}")
    kept = "harness-baseline/pooling-cpu"
    shutil.copytree(trees["base"] / kept, trees["pr"] / kept)  # the cache plugin: save, then restore
    print(f"pr: baseline step exit {baseline_step(trees['pr'], 'pr')}")
    summary = (trees["pr"] / "harness-compare" / "pooling-cpu" / "summary.md").read_text()
    print(summary.split("\nPlatform:")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
