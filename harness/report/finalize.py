"""``finalize(run_dir)``: the one place that reads a run directory (``phases.json``, ``ledger/``,
``junit/``) and writes ``report.json``, ``junit.xml``, ``summary.md``, ``timeline.svg`` and
``report.html`` through ``write``, the one writer of a report's files (``harness merge`` writes its merged
report through it too); the other report modules only turn the report dict into text, so every file is
written the same crash-safe way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.ledger.redaction import Redactor
from harness.report import baseline as before_after
from harness.report import history_lines, html, junit, out, summary, timeline
from harness.report.build import build
from harness.report.publish import publish as publish_summary
from harness.report.schema import Report
from harness.select import record as selected


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
    run_dir = out.directory(run_dir, "the run directory")
    redactor = Redactor(env, sys.argv if args is None else args)
    report = redactor.data(build(run_dir, env))
    opening = before_after.lines(report, baseline) + history_lines.lines(report) + _selection(report)
    text = summary.render(report, opening=opening)
    junit_xml = junit.merge(
        run_dir / "junit", report["records"], report["tests"], redactor.text, report.get("reruns", [])
    )
    for stale in run_dir.glob(".*.tmp"):  # a write of an earlier run killed before its rename
        stale.unlink(missing_ok=True)
    for path, content in junit.redacted(run_dir / "junit", redactor.text):  # failure texts carry them too
        out.write(path, content, "the run directory's JUnit file")
    write(run_dir, report, text, junit_xml)
    if publish:
        publish_summary(text, report, env)
    return report


def write(directory: Path, report: Report, summary_md: str, junit_xml: str) -> None:
    """The one writer of a report's files (``harness report``, ``harness run`` and ``harness merge``): its
    ``report.json`` whole, and the text, JUnit, timeline and page made from it, each atomically onto a
    regular file or a new path (``harness.report.out``)."""
    svg = timeline.svg(report)
    files = {
        # allow_nan=False: NaN is not JSON; the build never lets one through, this keeps it so
        "report.json": json.dumps(report, indent=1, sort_keys=False, allow_nan=False) + "\n",
        "junit.xml": junit_xml,
        "summary.md": summary_md,
        "timeline.svg": svg,
        "report.html": html.page(report, svg, summary_md),
    }
    for name in files:  # every path checked before the first is written: all of them or none
        out.target(directory / name, "a report file")
    for name, content in files.items():
        out.write(directory / name, content, "a report file")


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
