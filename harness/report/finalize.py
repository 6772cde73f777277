"""``finalize(run_dir)``: the one place that reads a run directory (``phases.json``, ``ledger/``,
``junit/``) and writes ``report.json``, ``junit.xml``, ``summary.md``, ``timeline.svg`` and
``report.html``; the other report modules only turn the report dict into text, so every file is written
the same crash-safe way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.errors import InfrastructureError
from harness.ledger.redaction import Redactor
from harness.report import baseline as before_after
from harness.report import history_lines, html, junit, summary, timeline
from harness.report.build import build
from harness.report.publish import publish as publish_summary
from harness.report.schema import Report
from harness.select import record as selected
from harness.report.store import write_atomic


def finalize(
    run_dir: Path,
    env: Mapping[str, str] | None = None,
    publish: bool = True,
    args: Iterable[str] | None = None,
    baseline: str | None = None,
) -> Report:
    """Write every report file of ``run_dir`` and return the report.

    Credentials (``env``'s, and those of options in ``args``, the command line by default) are taken out
    of the report's data before any file is rendered, and out of pytest's own JUnit files of the run.
    ``publish`` appends the summary to ``$GITHUB_STEP_SUMMARY`` and annotates the Buildkite build when
    the environment says we run there. ``baseline`` (a report of the base branch) opens the summary with
    before → after.
    """
    env = os.environ if env is None else env
    run_dir = Path(run_dir)
    redactor = Redactor(env, sys.argv if args is None else args)
    report = redactor.data(build(run_dir, env))
    opening = before_after.lines(report, baseline) + history_lines.lines(report) + _selection(report)
    text = summary.render(report, opening=opening)
    svg = timeline.svg(report)
    files = {
        # allow_nan=False: NaN is not JSON; the build never lets one through, this keeps it so
        "report.json": json.dumps(report, indent=1, sort_keys=False, allow_nan=False) + "\n",
        "junit.xml": junit.merge(
            run_dir / "junit", report["records"], report["tests"], redactor.text, report.get("reruns", [])
        ),
        "summary.md": text,
        "timeline.svg": svg,
        "report.html": html.page(report, svg, text),
    }
    try:
        for stale in run_dir.glob(".*.tmp"):  # a write of an earlier run killed before its rename
            stale.unlink(missing_ok=True)
        for path, content in junit.redacted(run_dir / "junit", redactor.text):  # failure texts carry them too
            write_atomic(path, content)
        for name, content in files.items():
            write_atomic(run_dir / name, content)
    except OSError as error:  # a full disk, a directory made read-only meanwhile
        raise InfrastructureError(f"{run_dir}: cannot write the report ({error.strerror or error})") from None
    if publish:
        publish_summary(text, report, env)
    return report


def main(args: argparse.Namespace) -> int:
    """``harness report DIR``: (re)write the report files of a run directory, e.g. after a killed run."""
    run_dir = Path(args.run_dir)
    report = finalize(run_dir)
    total = report["starts"]["total"]
    print(
        f"{run_dir / 'report.json'}: {len(report['tests'])} tests, {total['starts']} runner starts "
        f"({total['startup_s']:.1f} s), {len(report['findings'])} findings"
    )
    return 0


def _selection(report: Report) -> list[str]:
    """The summary's lines on ``harness run --changed-since``'s selection (``harness.select.record``)."""
    found = [summary.text(line) for line in selected.lines(report.get("selection"))]
    return [f"Selection: {found[0]}", "", *found[1:], ""] if found else []
