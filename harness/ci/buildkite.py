"""``harness ci buildkite``: a dynamic pipeline for ``buildkite-agent pipeline upload``.

One command step per platform × suite, then its baseline step (``harness.ci.baseline_step``: the shards merged
and compared with the base branch's); `harness run` annotates the build itself, the step only when the
session died before a summary. The pipeline is uploaded with Buildkite's interpolation on, so every
``$`` meant for the job's shell is written ``$$``; every value placed in a command is shell-quoted.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping

import yaml

from harness import split
from harness.ci import baseline_step
from harness.ci.learned import decide as history_decides
from harness.ci.matrix import CI_KINDS, Cell, CiSettings, Container, cells, harness_requirement, load
from harness.config.settings import CI_DEADLINE
from harness.config.validate import check
from harness.config.variables import COMPILE_CACHE, GPU_FREE, HISTORY
from harness.report import gpu_free_job
from harness.report.publish import annotation_context
from harness.select import SELECT

_NOX_VENV = ".harness-nox"
# Buildkite's own retry conditions for work lost to the machine, not to the tests.
_INFRA_FAILURES = ({"exit_status": -1}, {"exit_status": 255}, {"signal_reason": "agent_stop"})
DOCKER_PLUGIN = "docker#v5.13.0"
# docker run flag -> the docker plugin's key; devices and groups are lists there
_PLUGIN_KEYS = {"--gpus": "gpus", "--ipc": "ipc", "--shm-size": "shm-size", "--runtime": "runtime"}
_PLUGIN_LISTS = {"--device": "devices", "--group-add": "additional-groups"}
PARALLELISM = CI_KINDS["parallelism"]  # --parallelism within [tool.harness.ci] parallelism's bounds
SECRETS = ("HF_TOKEN",)  # passed from the agent's environment into the container when set there


def pipeline(
    selected: list[Cell],
    settings: CiSettings,
    parallelism: int,
    build: Mapping[str, str] | None = None,
    history: str | None = None,
) -> dict:
    """The pipeline as data (what ``main`` prints as YAML): per cell its test step, then the step that
    merges the cell's jobs and compares them with the base branch (``build``: the uploading job's
    environment, which says the branch). ``history``: a folder of the cells' last merged reports
    (``harness-baseline/<suite>-<platform>``, as the cache restores it), whose durations set each test
    step's timeout (``harness.ci.step_timeouts``) and, under ``gpu_free_job``, whether a GPU cell's
    GPU-free tests get a CPU step of their own."""
    base = baseline_step.Build.of(build if build is not None else os.environ, settings.baseline_branches)
    steps = []
    for cell in selected:
        decided = history_decides(cell, settings, parallelism, history, settings.timeout_in_minutes)
        test = _step(cell, settings, parallelism, base, decided.minutes)
        compare = {
            **baseline_step.step(cell, settings, parallelism, base, decided.moves),
            "retry": retries(settings),
        }
        if (
            decided.moves
        ):  # the GPU steps leave the listed tests to the CPU step, which reads the same history
            test["env"][GPU_FREE] = "deselect"
            steps += [test, _gpu_free_step(cell, settings, base, decided.minutes), compare]
        else:
            steps += [test, compare]
    return {"steps": steps}


def _gpu_free_step(cell: Cell, settings: CiSettings, base: baseline_step.Build, minutes: int) -> dict:
    """The CPU step of a GPU cell's GPU-free tests: the cpu session on the cpu queue, running only the
    tests the cell's history lists (``HARNESS_GPU_FREE=only``), into ``<cell's run dir>-gpu-free``."""
    cpu = Cell("cpu", cell.suite)
    out = baseline_step.gpu_free_dir(cell)
    container = settings.container("cpu")
    return {
        "key": f"{cell.key}-{gpu_free_job.KEPT}",
        "label": f"{cell.platform} {cell.suite}: GPU-free tests on the CPU",
        "agents": {"queue": settings.queues["cpu"]},
        "commands": _commands(cpu, settings, 1, container, minutes, out),
        "timeout_in_minutes": minutes,
        "env": {HISTORY: baseline_step.history_dir(cell), GPU_FREE: "only", SELECT: settings.select},
        "retry": retries(settings),
        "artifact_paths": [f"{out}/**/*"],
        "plugins": [
            *([{DOCKER_PLUGIN: _docker(container)}] if container else []),
            *baseline_step.history_cache(cell, settings, base),
        ],
    }


def history_step(
    selected: list[Cell], settings: CiSettings, argv: list[str], build: Mapping[str, str]
) -> dict:
    """``--history-step``: one step that restores each cell's last merged report from the cache its merge
    step keeps (``harness-baseline/<suite>-<platform>``, the base branch's) and uploads the pipeline made
    from them (``--history harness-baseline``: timeouts, GPU-free CPU steps)."""
    base = baseline_step.Build.of(build, settings.baseline_branches)
    setup, harness = baseline_step.install(settings)
    plugins = [
        entry for cell in selected for entry in baseline_step.history_cache(cell, settings, base)[:1]
    ]  # the base's kept report only: a pull request's own attempt is the test steps' to read first
    generate = shlex.join(
        [*harness.split(), "ci", "buildkite", *argv, "--history", baseline_step.BASELINE_DIR]
    ).replace("$", "$$")  # shell-quoted for the agent's shell, and `$$` so the upload leaves a `$` alone
    return {
        "steps": [
            {
                "key": "harness-pipeline-history",
                "label": "harness: pipeline from the last build's reports",
                "agents": {"queue": settings.queues["cpu"]},
                "commands": [*setup, f"set -o pipefail; {generate} | buildkite-agent pipeline upload"],
                "timeout_in_minutes": 30,
                "retry": retries(settings),
                "plugins": plugins,
            }
        ]
    }


def main(args: argparse.Namespace) -> int:
    settings, known_suites = load(ci_from=args.ci_settings)
    given = args.parallelism
    parallelism = settings.parallelism if given is None else check("--parallelism", given, PARALLELISM)
    selected = cells(settings, known_suites, args.platforms, args.suites)
    if getattr(args, "history_step", False):
        passed = [
            part
            for option, value in (
                ("--platforms", args.platforms),
                ("--suites", args.suites),
                ("--parallelism", given),
                ("--ci-settings", args.ci_settings),
            )
            if value is not None
            for part in (option, str(value))
        ]
        made = history_step(selected, settings, passed, os.environ)
        sys.stdout.write(yaml.safe_dump(made, sort_keys=False, width=1000))
        return 0
    made = pipeline(selected, settings, parallelism, history=args.history)
    sys.stdout.write(yaml.safe_dump(made, sort_keys=False, width=1000))
    return 0


def _step(
    cell: Cell, settings: CiSettings, parallelism: int, base: baseline_step.Build, minutes: int
) -> dict:
    container = settings.container(cell.platform)
    step = {
        "key": cell.key,
        "label": f"{cell.platform} {cell.suite}",
        "agents": {"queue": settings.queues[cell.platform]},
        "commands": _commands(cell, settings, parallelism, container, minutes),
        "timeout_in_minutes": minutes,
        # the run's history: what the cache restored (a missing one is a summary line, never a failure);
        # the docker plugin propagates the step's environment into the container
        "env": {
            HISTORY: baseline_step.history_dir(cell),
            COMPILE_CACHE: baseline_step.compile_dir(cell),
            SELECT: settings.select,  # a pull request's build selects; a branch's runs all, records
        },
        "retry": retries(settings),
        "artifact_paths": [f"{cell.shard_dirs(parallelism)}/**/*"],
    }
    # the cell's last report as the run's history (restored before the docker plugin runs)
    # the cache plugin restores before any plugin's command hook (the docker plugin's) runs
    plugins: list[dict] = [{DOCKER_PLUGIN: _docker(container)}] if container else []
    step["plugins"] = [
        *plugins,
        *baseline_step.history_cache(cell, settings, base),
        baseline_step.compile_cache(cell, settings, base, container.image if container else None),
    ]
    if parallelism > 1:
        step["parallelism"] = parallelism
    return step


def retries(settings: CiSettings) -> dict:
    """Buildkite's automatic retries for work lost to the machine, never for failed tests."""
    return {"automatic": [{**rule, "limit": settings.retry_limit} for rule in _INFRA_FAILURES]}


def _commands(
    cell: Cell,
    settings: CiSettings,
    parallelism: int,
    container: Container | None,
    minutes: int,
    out: str | None = None,
) -> list[str]:
    # An image has the test stack: nox and the harness that generated this step go into it (the container
    # is thrown away after the step). A prebuilt agent has all of it. Otherwise nox gets a venv of its own
    # (agents' system Pythons are often externally managed), with uv to build the session's venv.
    setup, nox = [], shlex.join(["nox", "-s", cell.session, "--no-venv"])
    if container:
        install = shlex.join(["python3", "-m", "pip", "install", "--quiet", "nox", harness_requirement()])
        setup = [f"PIP_BREAK_SYSTEM_PACKAGES=1 {install}"]
    elif not settings.prebuilt_image:
        setup = [f"python3 -m venv {_NOX_VENV} && {_NOX_VENV}/bin/pip install --quiet 'nox[uv]'"]
        nox = shlex.join([f"{_NOX_VENV}/bin/nox", "-s", cell.session])
    shard = f"-{split.name('$${BUILDKITE_PARALLEL_JOB}', parallelism)}" if parallelism > 1 else ""
    summary = shlex.quote(out or cell.run_dir) + f"{shard}/summary.md"
    # the context harness run annotates with (summary.annotation_context), so a retried job's summary
    # replaces this line rather than standing beside it
    context = (
        shlex.quote(annotation_context(cell.suite, cell.platform)) + shard + ("-gpu-free" if out else "")
    )
    # ``harness run`` annotates the build with its summary itself; a session that died before writing
    # one still leaves a line saying so.
    missing = (
        f"printf '%s exited %s before the harness wrote %s\\n' {shlex.quote(nox)} \"$$status\" {summary}"
        f" | buildkite-agent annotate --style error --context {context}"
    )
    # harness run ends its phases in time to write the report before Buildkite's timeout ends the job
    deadline = f"export {CI_DEADLINE}=$$(( $$(date +%s) + {minutes * 60} ))"
    return [
        deadline,
        *setup,
        f"status=0; {nox} || status=$$?",
        f"if [ ! -f {summary} ]; then {missing}; fi",
        'exit "$$status"',
    ]


def _docker(container: Container) -> dict:
    """The docker plugin's settings: image, device flags, env and volumes, with the agent mounted."""
    plugin: dict = {"image": container.image}
    for flag, value in container.options:
        if flag in _PLUGIN_LISTS:
            plugin.setdefault(_PLUGIN_LISTS[flag], []).append(value)
        else:
            plugin[_PLUGIN_KEYS[flag]] = value
    plugin["environment"] = [*SECRETS, *(f"{name}={value}" for name, value in container.env.items())]
    if container.volumes:
        plugin["volumes"] = list(container.volumes)
    # BUILDKITE_* (parallel job, build) reach harness run, and buildkite-agent annotate works inside
    plugin.update(
        {"propagate-environment": True, "mount-buildkite-agent": True, "shell": ["/bin/bash", "-e", "-c"]}
    )
    return plugin
