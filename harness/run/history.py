"""A previous run as ``harness run``'s history (``--history`` / ``HARNESS_HISTORY``; CI hands over the base
branch's last report, or a pull request's own previous attempt): its durations weigh the split, its
configurations and failures order the tests (``HARNESS_CONFIGURATIONS``). A history that is missing,
unreadable, of another format, suite or platform is one line in the summary (``no history: ...``) and the
run goes on without it: a first build has none. ``--durations-from`` stays strict: a file the user named
that cannot be read is bad input.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from harness.config.variables import FAILED, HISTORY
from harness.errors import HarnessError
from harness.ledger.records import seconds
from harness.report.schema import Report
from harness.report.store import load
from harness.run.shards import configurations_from

VARIABLE = HISTORY
FACTOR = 1.5  # per-test timeouts: recorded seconds x FACTOR + MARGIN_S, at least LEAST_S, at most the setting
MARGIN_S = 60.0
LEAST_S = 60.0


def read(given: str | None, suite: str, platform: str) -> tuple[dict[str, str] | None, dict]:
    """The history's configurations file contents (None without a usable history) and what phases.json
    records of it: ``{"source", "failed"}`` (the tests that failed there), or ``{"source", "note"}``
    saying why there is none. ``given`` may name several places separated by ``:`` (CI: a pull request's
    own previous attempt, then the base branch's last report); the first usable one is the history."""
    if not given:
        return None, {"source": None, "note": f"no history: none given (--history or {VARIABLE})"}
    why = []
    for path in [part for part in given.split(os.pathsep) if part]:
        try:
            configurations = _one(path, suite, platform)
        except HarnessError as error:
            why.append(str(error))
            continue
        failed = sorted(
            t for t, value in configurations.items() if value == FAILED or value.startswith(f"{FAILED} ")
        )
        return configurations, {"source": path, "failed": failed}
    return None, {"source": given, "note": f"no history: {'; '.join(why) or repr(given)}"}


def _one(path: str, suite: str, platform: str) -> dict[str, str]:
    report = load(Path(path))
    found = (report.get("suite"), report["platform"].get("name"))
    if found != (suite, platform):
        raise HarnessError(
            f"{path} is of suite {found[0]!r} on {found[1]!r}, this run is {suite!r} on {platform!r}"
        )
    return configurations_from(path)


def test_timeouts(report: Report, bound: float) -> dict[str, float]:
    """Per-test timeouts from a history's recorded seconds (setup, call and teardown, as pytest-timeout
    times them) of the tests that ran there (passed or failed; a skipped test's 0 s says nothing):
    ``FACTOR`` x seconds + ``MARGIN_S``, rounded up, at least ``LEAST_S``, never past ``bound`` (the
    setting's ``test_timeout_s``); a record that is not a finite, non-negative number gets the bound."""
    found: dict[str, float] = {}
    for test in report["tests"]:
        if test["outcome"] not in ("passed", "failed"):
            continue
        took = seconds(test)
        found[test["nodeid"]] = timeout_s(took, bound)
    return found


def timeout_s(took: float, bound: float) -> float:
    """One test's timeout from its recorded seconds (``test_timeouts``' rule)."""
    if not (isinstance(took, int | float) and math.isfinite(took) and took >= 0):
        return float(bound)
    return float(min(bound, max(LEAST_S, math.ceil(min(took, 1e9) * FACTOR + MARGIN_S))))
