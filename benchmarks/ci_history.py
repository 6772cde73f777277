"""Backs docs/ci.md § History: each build learns from its last, on real CPU engines. A copy of this
working tree whose pooling suite is cut into three files (the shared-engine class, the late-interaction
class, the standalone test) with one test broken on the default branch; no durations file anywhere. Each
build runs as the generated Buildkite steps run it: `harness ci buildkite --history harness-baseline`
(the test step's timeout, its HARNESS_HISTORY), two shards through `BUILDKITE_PARALLEL_JOB`, then the
cell's merge step (the cache plugin's save and restore are the folder staying where it is).

1. a build of `main`: no history (its summary says so), the split by test count; its merge step keeps
   `harness-baseline/pooling-cpu`;
2. a pull request into `main`: the timeout from main's recorded durations, the shards balanced by them
   (max/mean printed beside the split by count), the broken test first in its shard, with its class;
3. the GPU-free tests (`gpu_free_job`): main's merged report judged as a CUDA cell's (no GPU here: its
   platform renamed, `gpu_free` computed as on a GPU), the CUDA pipeline `harness ci buildkite` makes from
   it (the GPU step's `HARNESS_GPU_FREE=deselect`, the CPU step), and that CPU step run for real.

    .nox/cpu_stack/bin/python benchmarks/ci_history.py --work /tmp/cih
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BUILDS = {
    "main": {"BUILDKITE_BRANCH": "main", "BUILDKITE_PULL_REQUEST": "false"},
    "pr": {
        "BUILDKITE_BRANCH": "learns",
        "BUILDKITE_PULL_REQUEST": "1",
        "BUILDKITE_PULL_REQUEST_BASE_BRANCH": "main",
    },
}
CI = (
    '\n[tool.harness.ci]\nprebuilt_image = true\nplatforms = ["cpu"]\nsuites = ["pooling"]\nparallelism = 2\n'
    "gpu_free_job = true\n"
)
POOLING = "tests/models/pooling"
# each file keeps some of test_embedding.py's tests: pytest collects what the module still names
KEEP = {
    "test_shared.py": ["TestSharedEngine", "test_reference_tokens_pool_to_the_sentence_embedding"],
    "test_late.py": ["TestLateInteraction"],
    "test_standalone.py": [
        "test_float32_token_embeddings_match_hf",
        "test_tensor_parallel_embeddings_match_sentence_transformers",
    ],
}
TESTS = sorted({name for names in KEEP.values() for name in names})
BROKEN = "test_late.py::TestLateInteraction::test_maxsim_scores_match_numpy"
BREAK = """

def _broken(self, pooling_model):
    raise AssertionError("broken on the default branch (benchmarks/ci_history.py)")


TestLateInteraction.test_maxsim_scores_match_numpy = _broken
"""


def checkout(work: Path) -> Path:
    """This working tree's files (tracked and new, not ignored), the pooling suite cut in three files."""
    tree = work / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    source = (tree / POOLING / "test_embedding.py").read_text()
    for file, names in KEEP.items():
        gone = [name for name in TESTS if name not in names]
        text = source + f"\n\ndel {', '.join(gone)}\n" + (BREAK if file == "test_late.py" else "")
        (tree / POOLING / file).write_text(text)
    (tree / POOLING / "test_embedding.py").unlink()
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    start = text.index("[tool.harness.ci]")
    pyproject.write_text(text[:start] + text[text.index("\n[", start + 1) + 1 :] + CI)
    return tree


def generate(tree: Path, build: str) -> tuple[dict, dict, str]:
    """The cell's test and merge steps as `harness ci buildkite --history harness-baseline` prints them
    in ``build``, and what it said of the timeout."""
    env = {**os.environ, **BUILDS[build], "BUILDKITE_PIPELINE_DEFAULT_BRANCH": "main"}
    printed = subprocess.run(
        [sys.executable, "-m", "harness", "ci", "buildkite", "--history", "harness-baseline"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    test, merge = yaml.safe_load(printed.stdout)["steps"]
    return test, merge, printed.stderr.strip()


def run_shards(tree: Path, step: dict) -> float:
    started = time.monotonic()
    for index in range(step["parallelism"]):
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")},
            **step["env"],
            "BUILDKITE_PARALLEL_JOB": str(index),
            "BUILDKITE_PARALLEL_JOB_COUNT": str(step["parallelism"]),
            "HARNESS_CI_DEADLINE": str(int(time.time()) + step["timeout_in_minutes"] * 60),
        }
        done = subprocess.run(
            [sys.executable, "-m", "harness", "run", "pooling", "--platform", "cpu"], cwd=tree, env=env
        )
        print(f"shard {index}/2: exit {done.returncode}", flush=True)
    return time.monotonic() - started


def merge_step(tree: Path, build: str, step: dict) -> int:
    env = {**os.environ, **BUILDS[build]}
    commands = [c.replace("$$", "$") for c in step["commands"] if not c.startswith("buildkite-agent ")]
    script = "\n".join(c.replace("harness merge", f"{sys.executable} -m harness merge", 1) for c in commands)
    return subprocess.run(["bash", "-e", "-c", script], cwd=tree, env=env).returncode


def shards(tree: Path) -> list[dict]:
    return [json.loads((tree / f"harness-out/pooling-cpu-{i}of2/report.json").read_text()) for i in range(2)]


def spread(values: list[float]) -> str:
    return f"{' / '.join(f'{v:.0f}' for v in values)} s, max/mean {max(values) / statistics.mean(values):.2f}"


def describe(tree: Path, name: str) -> None:
    """Per shard: its files, test seconds and wall; the history line of its summary; its first tests."""
    reports = shards(tree)
    walls = [sum(phase["wall_s"] or 0 for phase in report["phases"]) for report in reports]
    tests = [
        sum((t.get("setup_s") or 0) + (t.get("call_s") or 0) + (t.get("teardown_s") or 0) for t in r["tests"])
        for r in reports
    ]
    print(f"{name}: shard test seconds {spread(tests)}; shard walls {spread(walls)}")
    for index, report in enumerate(reports):
        split = report["splits"][0]
        files = sorted({n.split("::")[0].rsplit("/", 1)[-1] for n in split["assigned"]})
        order = [t["nodeid"].split("/")[-1] for t in sorted(report["tests"], key=lambda t: t["t"])]
        durations = split["inputs"]["durations"]
        print(f"  shard {index}: {', '.join(files)}; durations: {durations}; first: {order[:2]}")
        failed = [t["t"] for t in report["tests"] if t["outcome"] in ("failed", "error")]
        if failed:  # from the run's start, and from its first session's collected tests (its worker event)
            since = min(failed) - (report["started"] or 0)
            collected = min(failed) - min(w["t"] for w in report["workers"])
            after = f"{since:.1f} s after the run's start, {collected:.1f} s after its tests were collected"
            print(f"  shard {index}: first failure {after}")
        summary = (tree / f"harness-out/pooling-cpu-{index}of2/summary.md").read_text()
        print("  " + next((line for line in summary.splitlines() if "istory" in line), "(no history line)"))


def predicted(tree: Path) -> None:
    """The split the pull request would make by test count (no history) and by main's durations."""
    sys.path.insert(0, str(tree))
    from harness import split  # noqa: PLC0415 -- the copy's
    from harness.report.store import recorded  # noqa: PLC0415

    seconds, _, _ = recorded(tree / "harness-baseline/pooling-cpu")
    nodeids = sorted(seconds)
    by_count = split.plan(nodeids, 2, {}, split.Groups())
    by_time = split.plan(nodeids, 2, seconds, split.Groups())
    for name, made in (("by test count", by_count), ("by main's durations", by_time)):
        took = [sum(seconds[n] for n in shard) for shard in made.shards]
        print(f"pr: split {name}: main's seconds per shard {spread(took)}")


def gpu_free_split(tree: Path) -> None:
    """Main's report as a CUDA cell's history, the pipeline made from it, and its CPU step run."""
    sys.path.insert(0, str(tree))
    from harness.report import gpu_free  # noqa: PLC0415 -- the copy's

    report = json.loads((tree / "harness-baseline/pooling-cpu/report.json").read_text())
    report["platform"]["name"] = "cuda"
    report["gpu_free"] = gpu_free.section("cuda", report["tests"], report["records"], report["workers"])
    kept = tree / "harness-baseline/pooling-cuda"
    kept.mkdir(parents=True, exist_ok=True)
    (kept / "report.json").write_text(json.dumps(report))
    listed = report["gpu_free"]["tests"]
    print(
        f"gpu-free: {len(listed)} of {len(report['tests'])} tests, "
        f"{report['gpu_free']['gpu_minutes']} GPU-minutes:"
    )
    for each in listed:
        print(f"  {each['nodeid'].split('/')[-1]} {each['seconds']:.1f} s")
    env = {**os.environ, **BUILDS["pr"], "BUILDKITE_PIPELINE_DEFAULT_BRANCH": "main"}
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "ci",
            "buildkite",
            "--platforms",
            "cuda",
            "--history",
            "harness-baseline",
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    steps = yaml.safe_load(printed.stdout)["steps"]
    print("gpu-free: " + printed.stderr.strip().replace("\n", "\ngpu-free: "))
    for step in steps:
        print(f"gpu-free: step {step['key']}: queue {step['agents']['queue']}, env {step.get('env', {})}")
    cpu = next(step for step in steps if step["key"].endswith("-gpu-free"))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "pooling", "--platform", "cpu"],
        cwd=tree,
        env={**clean, **cpu["env"]},
    )
    took = time.monotonic() - started
    ran = json.loads((tree / "harness-out/pooling-cuda-gpu-free/report.json").read_text())
    outcomes = sorted({t["outcome"] for t in ran["tests"]})
    starts = ran["starts"]["total"]["starts"]
    tally = f"{len(ran['tests'])} tests ({', '.join(outcomes)}), {starts} runner starts"
    print(f"gpu-free: CPU step exit {done.returncode} in {took:.0f} s: {tally}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    tree = checkout(args.work)
    for build in BUILDS:
        test, merge, said = generate(tree, build)
        print(f"{build}: timeout_in_minutes {test['timeout_in_minutes']} ({said or 'no history line'})")
        if build == "pr":
            predicted(tree)
        print(f"{build}: two shards in {run_shards(tree, test):.0f} s", flush=True)
        describe(tree, build)
        print(f"{build}: merge step exit {merge_step(tree, build, merge)}", flush=True)
    gpu_free_split(tree)
    return 0


if __name__ == "__main__":
    sys.exit(main())
