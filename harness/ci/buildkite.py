"""``harness ci buildkite``: a dynamic pipeline for ``buildkite-agent pipeline upload``.

One command step per platform × suite; `harness run` annotates the build itself, the step only when the
session died before a summary. The pipeline is uploaded with Buildkite's interpolation on, so every
``$`` meant for the job's shell is written ``$$``; every value placed in a command is shell-quoted.
"""

from __future__ import annotations

import argparse
import shlex
import sys

import yaml

from harness.ci.matrix import Cell, CiSettings, cells, load
from harness.errors import HarnessError
from harness.report.publish import annotation_context

# Buildkite's own retry conditions for work lost to the machine, not to the tests.
_NOX_VENV = ".harness-nox"
_INFRA_FAILURES = ({"exit_status": -1}, {"exit_status": 255}, {"signal_reason": "agent_stop"})


def pipeline(selected: list[Cell], settings: CiSettings, parallelism: int) -> dict:
    """The pipeline as data (what ``main`` prints as YAML)."""
    return {"steps": [_step(cell, settings, parallelism) for cell in selected]}


def main(args: argparse.Namespace) -> int:
    settings, known_suites = load()
    parallelism = settings.parallelism if args.parallelism is None else args.parallelism
    if parallelism < 1:
        raise HarnessError(f"--parallelism {parallelism} must be at least 1")
    selected = cells(settings, known_suites, args.platforms, args.suites)
    sys.stdout.write(yaml.safe_dump(pipeline(selected, settings, parallelism), sort_keys=False, width=1000))
    return 0


def _step(cell: Cell, settings: CiSettings, parallelism: int) -> dict:
    # A prebuilt image has nox and the test dependencies; otherwise nox gets a venv of its own (agents'
    # system Pythons are often externally managed) and builds the session's venv as usual.
    if settings.prebuilt_image:
        setup, nox = [], shlex.join(["nox", "-s", cell.session, "--no-venv"])
    else:
        setup = [f"python3 -m venv {_NOX_VENV} && {_NOX_VENV}/bin/pip install --quiet nox"]
        nox = shlex.join([f"{_NOX_VENV}/bin/nox", "-s", cell.session])
    summary = shlex.quote(f"{cell.run_dir}/summary.md")
    # the context harness run annotates with (summary.annotation_context), so a retried job's summary
    # replaces this line rather than standing beside it
    context = shlex.quote(annotation_context(cell.suite, cell.platform)) + (
        f"-$${{BUILDKITE_PARALLEL_JOB}}of{parallelism}" if parallelism > 1 else ""
    )
    # ``harness run`` annotates the build with its summary itself; a session that died before writing
    # one still leaves a line saying so.
    missing = (
        f"printf '%s exited %s before the harness wrote %s\\n' {shlex.quote(nox)} \"$$status\" {summary}"
        f" | buildkite-agent annotate --style error --context {context}"
    )
    step = {
        "key": cell.key,
        "label": f"{cell.platform} {cell.suite}",
        "agents": {"queue": settings.queues[cell.platform]},
        "commands": [
            *setup,
            f"status=0; {nox} || status=$$?",
            f"if [ ! -f {summary} ]; then {missing}; fi",
            'exit "$$status"',
        ],
        "timeout_in_minutes": settings.timeout_in_minutes,
        "retry": {"automatic": [{**rule, "limit": settings.retry_limit} for rule in _INFRA_FAILURES]},
        "artifact_paths": [f"{cell.run_dir}/**/*"],
    }
    if parallelism > 1:
        step["parallelism"] = parallelism
    return step
