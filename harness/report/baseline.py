"""Before → after against a baseline (the base branch's report): the lines a summary opens with, the way
vLLM PR #52570 wrote its table: the suite's starts, reuse, wall and outcomes, then each file whose starts
changed, largest change first. A baseline that cannot be read, or is of another suite or platform, is one
line in the summary, never a failure and never a wrong comparison.
"""

from __future__ import annotations

import os

from harness.errors import HarnessError
from harness.report.compare import METRICS, SECONDS, change, compare
from harness.report.schema import Report
from harness.report.shards import load_suite

STARTS = ("vllm_starts", "hf_starts")


def against(report: Report, path: str | None) -> tuple[dict | None, str | None]:
    """``compare(baseline, report)``, or why there is none (None, None: no baseline asked for)."""
    if not path:
        return None, None
    if not os.path.lexists(path):  # CI restored nothing: the base branch kept none yet, or no store answered
        return None, f"no baseline at {path} yet: the base branch's build keeps one; nothing compared"
    try:
        before = load_suite(path)
    except HarnessError as error:
        return None, f"the baseline {path} cannot be compared: {str(error).splitlines()[0]}"
    for field, then, now in (
        ("suite", before.get("suite"), report.get("suite")),
        ("platform", before["platform"].get("name"), report["platform"].get("name")),
    ):
        if then != now:
            return None, f"the baseline {path} is of {field} {then!r}, this run of {now!r}: not compared"
    return compare(before, report), None


def lines(report: Report, path: str | None) -> list[str]:
    """The summary's opening section: before → after, or the one line why not; nothing without a path."""
    result, problem = against(report, path)
    if problem is not None:
        return ["## Before → after", "", problem, ""]
    if result is None:
        return []
    suite = result["suite"]["metrics"]
    row = " | ".join(change(*suite[m], seconds=m in SECONDS) for m in METRICS)
    out = ["## Before → after", "", f"Against {path}.", ""]
    out += [
        f"| | {' | '.join(METRICS.values())} |",
        "|---" * (len(METRICS) + 1) + "|",
        f"| suite | {row} |",
        "",
    ]
    changed = [f for f in result["files"] if any(f["metrics"][m][0] != f["metrics"][m][1] for m in STARTS)]
    changed.sort(key=lambda f: (-_moved(f), f["name"]))
    if changed:
        out += ["| file | vLLM starts | HF starts |", "|---|---|---|"]
        for file in changed:
            name = file["name"].replace("|", "\\|").replace("`", "'")
            status = "" if file["status"] == "both" else f" ({file['status']})"
            cells = " | ".join(change(*file["metrics"][m]) for m in STARTS)
            out.append(f"| `{name}`{status} | {cells} |")
        out.append("")
    return out


def _moved(file: dict) -> int:
    return sum(abs((file["metrics"][m][1] or 0) - (file["metrics"][m][0] or 0)) for m in STARTS)
