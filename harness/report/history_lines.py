"""The summary's lines about the run's history (``harness run --history``): where it came from, how many
tests that failed there ran first, and how soon this run's first failure came; or why there was none."""

from __future__ import annotations

from harness.report.schema import Report
from harness.report.summary import code, text

FAILING = ("failed", "error")


def lines(report: Report) -> list[str]:
    """The history's lines for the top of the summary; none where the run was given no history."""
    history = report.get("history")
    if not history:
        return []
    if history.get("note"):
        return [f"{text(history['note'])}; the run goes on without it.", ""]
    failed = set(history.get("failed") or [])
    ran = {test["nodeid"] for test in report["tests"]}
    first = first_failure_s(report)
    came = "no test failed" if first is None else f"first failure {first:.1f} s after the run's start"
    again = len(failed & ran)
    here = (
        f"the {again} of them in this run ran first, with the tests that share their engines"
        if again
        else "none of them in this run"
    )
    return [
        f"History: `{code(history.get('source'))}`: {len(failed)} tests failed there; {here}; {came}.",
        "",
    ]


def first_failure_s(report: Report) -> float | None:
    """Seconds from the run's start to the first failed test's result, None without a failure."""
    started = report.get("started")
    ends = [test["t"] for test in report["tests"] if test["outcome"] in FAILING]
    if started is None or not ends:
        return None
    return max(0.0, min(ends) - started)
