"""Backs docs/ci.md § What `merge` checks: every test of a sharded suite in one shard, proven by
``harness merge``: a suite of three phases
(shared-engine, standalone, multi-gpu) whose ``python_files`` is not pytest's default, run as
``harness run --shard i/N`` and as ``harness run -- --num-shards N --shard-id i`` for N = 2..5 on the cpu
platform, each N's shards merged. Prints one row per N and form: the tests each shard ran, merge's
accounting line and exit code, and the wall of the N jobs run one after another.

    python benchmarks/shard_accounting.py [--work DIR] [--counts 2,3,4,5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

PYPROJECT = """
[tool.pytest.ini_options]
python_files = ["check_*.py"]
markers = ["standalone: builds its own runners"]

[tool.harness.suites.demo]
paths = ["checks"]
"""
ENGINE = """
import pytest

@pytest.fixture(scope="module")
def engine():
    return object()

@pytest.mark.parametrize("x", range({tests}))
def test_shared(engine, x):
    pass

@pytest.mark.standalone
def test_own():
    pass
"""
CLASS = """
class TestK:
    def test_1(self):
        pass

    def test_2(self):
        pass
"""
GPUS = """
import pytest

@pytest.mark.gpus(2)
def test_two():
    pass

@pytest.mark.gpus(1)
def test_one():
    pass
"""


def suite(root: Path) -> int:
    """The suite under ``root``: 12 files in three folders; returns how many tests pytest collects."""
    (root / "pyproject.toml").write_text(PYPROJECT)
    total = 0
    for number in range(12):
        folder = root / "checks" / ("models", "kernels", "entrypoints")[number % 3]
        folder.mkdir(parents=True, exist_ok=True)
        kind = number % 4
        if kind == 3:
            (folder / f"check_gpus_{number}.py").write_text(textwrap.dedent(GPUS))
            total += 2
        elif kind == 2:
            (folder / f"check_class_{number}.py").write_text(textwrap.dedent(CLASS))
            total += 2
        else:
            (folder / f"check_engine_{number}.py").write_text(ENGINE.replace("{tests}", str(number % 5 + 1)))
            total += number % 5 + 2
        (folder / f"test_default_{number}.py").write_text("def test_not_this_suites():\n    pass\n")
    return total


def harness(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BUILDKITE", "HARNESS_"))}
    command = [sys.executable, "-m", "harness", *args]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--counts", default="2,3,4,5")
    args = parser.parse_args()
    root = args.work or Path(tempfile.mkdtemp(prefix="shard-accounting-"))
    root.mkdir(parents=True, exist_ok=True)
    total = suite(root)
    print(f"suite: {total} tests in 12 files, python_files = check_*.py, under {root}")
    print("| N | form | tests per shard | merge | exit | wall (N jobs) |")
    print("|---|---|---|---|---|---|")
    failed = False
    for count in map(int, args.counts.split(",")):
        for form in ("--shard i/N", "-- --num-shards N --shard-id i"):
            outs, started = [], time.monotonic()
            for index in range(count):
                out = f"out/{'shard' if form.startswith('--shard') else 'flags'}-{index}of{count}"
                shard = ["--shard", f"{index}/{count}"] if form.startswith("--shard") else []
                after = [] if shard else ["--", "--num-shards", str(count), "--shard-id", str(index)]
                done = harness(root, "run", "--platform", "cpu", "--out", out, *shard, "demo", *after)
                if done.returncode != 0:
                    sys.exit(f"{form} {index}/{count}: exit {done.returncode}\n{done.stdout}{done.stderr}")
                outs.append(out)
            wall = time.monotonic() - started
            merged = harness(root, "merge", *outs, "--out", f"{outs[0].rpartition('-')[0]}-merged-{count}")
            said = next(
                (
                    line.removeprefix("harness: ")
                    for line in (merged.stdout + merged.stderr).splitlines()
                    if "accounted" in line
                ),
                merged.stderr.strip(),
            )
            tests = [len(json.loads((root / out / "report.json").read_text())["tests"]) for out in outs]
            failed |= (
                merged.returncode != 0 or said != f"accounted: {total} of {total} tests in {count} shards"
            )
            shown = "/".join(map(str, tests))
            print(
                f"| {count} | `{form}` | {shown} | {said} | {merged.returncode} | {wall:.0f} s |", flush=True
            )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
