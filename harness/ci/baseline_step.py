"""The Buildkite step after a suite's jobs: their reports merged into one and compared with the base
branch's, one annotation for the suite; a build of a branch that keeps the baseline saves its merged
report instead.

The baseline lives in Buildkite's cache plugin (no server of ours): pipeline level, one entry per suite,
platform and branch (``key-extra``), replaced by each build that keeps it, restored by each that compares.
Which of the two a cell's step does is decided when the pipeline is generated, from the uploading job's
environment: its branch, the pull request's base branch and the pipeline's default branch.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from harness.ci.matrix import Cell, CiSettings, harness_requirement
from harness.report.gpu_free_job import KEPT as GPU_FREE  # the CPU job's key and run directory suffix

CACHE_PLUGIN = "cache#v1.12.0"
BASELINE_DIR = "harness-baseline"  # the cache plugin's path: the kept merged report, per cell
COMPARE_DIR = "harness-compare"  # a comparing build's merged report and summary, per cell
COMPILE_DIR = "harness-compile"  # vLLM's and torch inductor's compile caches, per cell
_VENV = ".harness-compare"
# Outside a build (a preview) the default branch is left to the upload's interpolation.
_DEFAULT = "${BUILDKITE_PIPELINE_DEFAULT_BRANCH}"


@dataclass(frozen=True)
class Build:
    """What the build being generated does with the baseline."""

    keeps: bool  # its merged reports become the baseline of its branch
    branch: str  # the branch whose baseline it saves or restores, as the pipeline writes it
    own: str | None = None  # a comparing build's own branch: its merged report is its next attempt's history

    @classmethod
    def of(cls, env: Mapping[str, str], branches: tuple[str, ...]) -> Build:
        """Builds of the default branch and of ``branches`` keep; a pull request compares with its base
        branch when that one keeps, every other build with the default branch."""
        default = env.get("BUILDKITE_PIPELINE_DEFAULT_BRANCH")
        keepers = {default, *branches} - {None}
        request = env.get("BUILDKITE_PULL_REQUEST", "false") not in ("", "false")
        branch = env.get("BUILDKITE_BRANCH")
        if branch in keepers and not request:
            return cls(True, _literal(branch))
        base = env.get("BUILDKITE_PULL_REQUEST_BASE_BRANCH") if request else None
        own = _literal(branch) if branch else None
        return cls(False, _literal(base if base in keepers else default), own)


def _literal(branch: str | None) -> str:
    # a branch name may hold '$'; the upload would read it as a variable
    return _DEFAULT if branch is None else branch.replace("$", "$$")


def step(cell: Cell, settings: CiSettings, parallelism: int, build: Build, gpu_free: bool = False) -> dict:
    """The cell's merge step: after its jobs (even failed ones), on the cpu queue, outside any image.
    ``gpu_free``: the cell's GPU-free tests ran in a CPU step (``gpu_free_job``), whose report is kept
    beside the merged one (``<out>/gpu-free/``), where the next build's list reads which passed there."""
    kept = f"{BASELINE_DIR}/{cell.suite}-{cell.platform}"
    setup, harness = install(settings)
    download = ["buildkite-agent", "artifact", "download", f"{cell.shard_dirs(parallelism)}/report.json", "."]
    if build.keeps:
        out, extra, cache = kept, [], {"save": "pipeline", "force": True}
        label = f"{cell.platform} {cell.suite}: keep the baseline of {build.branch}"
    else:
        out = f"{COMPARE_DIR}/{cell.suite}-{cell.platform}"
        gates = [f"--fail-on-regression={gate}" for gate in settings.fail_on_regression]
        extra = ["--baseline", kept, *gates]
        cache = {"restore": "pipeline"}
        label = f"{cell.platform} {cell.suite}: starts against {build.branch}"
    # the shard directories are a glob for the shell: cell names hold no character it would read
    merge = f"{harness} merge {cell.shard_dirs(parallelism)} {shlex.join(['--out', out, *extra])}"
    plugin = {
        "path": kept,
        **cache,
        "key-extra": f"{cell.key}@{build.branch}",
        "backend": settings.cache_backend,
        "soft-fail": True,  # a store that cannot be reached is a missing baseline: one summary line
    }
    plugins = [{CACHE_PLUGIN: plugin}]
    if not build.keeps and build.own:  # the next attempt of this branch reads it first (history_cache)
        saved = {**plugin, "path": out, "key-extra": f"{cell.key}@attempt@{build.own}"}
        saved.pop("restore", None)
        plugins.append({CACHE_PLUGIN: {**saved, "save": "pipeline", "force": True}})
    kept_cpu = _kept_gpu_free(cell, out) if gpu_free else []
    return {
        "key": f"{cell.key}-baseline",
        "label": label,
        "depends_on": [cell.key, f"{cell.key}-{GPU_FREE}"] if gpu_free else cell.key,
        "allow_dependency_failure": True,
        "agents": {"queue": settings.queues["cpu"]},
        "commands": [*setup, f"{shlex.join(download)} --step {cell.key}", *kept_cpu, merge],
        "timeout_in_minutes": 30,
        "plugins": plugins,
        "artifact_paths": [f"{out}/*"],
    }


def gpu_free_dir(cell: Cell) -> str:
    """The run directory of a GPU cell's GPU-free CPU job (``harness run --gpu-free only``'s default)."""
    return f"{cell.run_dir}-{GPU_FREE}"


def _kept_gpu_free(cell: Cell, out: str) -> list[str]:
    """The CPU job's report, downloaded and kept as ``<out>/gpu-free/report.json`` (a job that left none:
    nothing kept, and its tests go back to the GPU steps)."""
    report = f"{gpu_free_dir(cell)}/report.json"
    fetch = shlex.join(["buildkite-agent", "artifact", "download", report, "."])
    kept = shlex.join(["cp", report, f"{out}/{GPU_FREE}/report.json"])
    return [
        f"{fetch} --step {cell.key}-{GPU_FREE} || true",
        f"if [ -f {shlex.quote(report)} ]; then mkdir -p {shlex.quote(f'{out}/{GPU_FREE}')} && {kept}; fi",
    ]


def history_dir(cell: Cell) -> str:
    """Where a test step finds its history (``HARNESS_HISTORY``): its branch's previous attempt where the
    cache had one, else the base branch's kept report (``harness run`` takes the first usable)."""
    name = f"{cell.suite}-{cell.platform}"
    return f"{COMPARE_DIR}/{name}:{BASELINE_DIR}/{name}"


def history_cache(cell: Cell, settings: CiSettings, build: Build) -> list[dict]:
    """The cache plugin entries a test step restores its history with: the base branch's kept report (a
    keeping build: its own branch's last) and a comparing build's own previous attempt (its merged report,
    which its merge step saves), each where ``history_dir`` looks."""
    restores = [(build.branch, "base")] + ([(f"{build.own}", "own")] if build.own and not build.keeps else [])
    name = f"{cell.suite}-{cell.platform}"
    return [
        {
            CACHE_PLUGIN: {
                "path": f"{BASELINE_DIR if which == 'base' else COMPARE_DIR}/{name}",
                "restore": "pipeline",
                "key-extra": f"{cell.key}@{branch}" if which == "base" else f"{cell.key}@attempt@{branch}",
                "backend": settings.cache_backend,
                "soft-fail": True,  # no history: one summary line, the run goes on
            }
        }
        for branch, which in restores
    ]


def compile_dir(cell: Cell) -> str:
    """The kept compile cache of a cell's test step (``HARNESS_COMPILE_CACHE``, harness.run.kept_cache)."""
    return f"{COMPILE_DIR}/{cell.suite}-{cell.platform}"


def compile_cache(cell: Cell, settings: CiSettings, build: Build, image: str | None) -> dict:
    """The cache plugin entry of a cell's compile cache: restored by every build from its base branch's (a
    keeping build: its own branch's), saved by a keeping build. Its key names the image where there is one
    (its vLLM and torch); inside the folder, harness run keeps one subfolder per platform, vLLM and torch."""
    entry = {
        "path": compile_dir(cell),
        "restore": "pipeline",
        "key-extra": f"{cell.key}@compile@{build.branch}" + (f"@{image}" if image else ""),
        "backend": settings.cache_backend,
        "soft-fail": True,  # no cache: engines compile, as without one
    }
    if build.keeps:
        entry.update({"save": "pipeline", "force": True})
    return {CACHE_PLUGIN: entry}


def install(settings: CiSettings) -> tuple[list[str], str]:
    """Commands that install the harness, and its command: a prebuilt agent has it."""
    if settings.prebuilt_image:
        return [], "harness"
    install = shlex.join([f"{_VENV}/bin/pip", "install", "--quiet", harness_requirement()])
    return [f"python3 -m venv {_VENV} && {install}"], f"{_VENV}/bin/harness"
