"""The summary where CI shows it: ``$GITHUB_STEP_SUMMARY`` and Buildkite annotations."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping

from harness.report.outcomes import worst
from harness.report.schema import Report
from harness.split import Shard


def annotation_context(suite: str | None, platform: str | None, shard: str | None = None) -> str:
    """``harness-<suite>-<platform>[-<i>of<N>]``: the Buildkite annotation a run (or its CI step) writes;
    ``shard`` as a report writes it (``i/N``), named as its run directory is (``Shard.name``)."""
    parts = ("harness", suite, platform, Shard.parse(shard, "report shard").name if shard else None)
    return "-".join(str(part) for part in parts if part)


def publish(text: str, report: Report, env: Mapping[str, str]) -> None:
    """Append to ``$GITHUB_STEP_SUMMARY`` and annotate the Buildkite build, when running there.

    One annotation context per suite, platform and shard, so parallel jobs do not overwrite each other
    and a re-run replaces its own. Best effort: the report files are already written, so a summary file
    that cannot be written or an agent that cannot run is a warning line, never a changed exit code.
    """
    if env.get("GITHUB_STEP_SUMMARY"):
        try:
            with open(env["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as handle:
                handle.write(text + "\n")
        except OSError as error:
            _warn(f"cannot append to $GITHUB_STEP_SUMMARY {env['GITHUB_STEP_SUMMARY']!r}: {error.strerror}")
    agent = shutil.which("buildkite-agent", path=env.get("PATH"))
    if env.get("BUILDKITE") and agent:
        _annotate(agent, text, report)


def _annotate(agent: str, text: str, report: Report) -> None:
    context = annotation_context(report.get("suite"), report["platform"].get("name"), report.get("shard"))
    try:
        done = subprocess.run(
            [agent, "annotate", "--style", style(report), "--context", context],
            input=text,
            text=True,
            capture_output=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        _warn(f"buildkite-agent annotate did not run: {getattr(error, 'strerror', None) or error}")
        return
    if done.returncode:
        message = (done.stderr.strip().splitlines() or [""])[-1]
        _warn(f"buildkite-agent annotate exited {done.returncode}: {message}")


def _warn(message: str) -> None:
    print(f"harness: warning: {' '.join(message.split())}", file=sys.stderr)


def style(report: Report) -> str:
    """Buildkite annotation style: a failed phase is an error (no tests collected is not), findings a
    warning."""
    if worst([code for p in report["phases"] if (code := p.get("exit_code")) is not None]):
        return "error"
    return "warning" if report["findings"] else "success"
