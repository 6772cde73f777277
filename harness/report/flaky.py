"""``harness flaky REPORT...``: the tests whose recent builds make them flaky, by vLLM's quarantine rule.

vLLM's CI keeps a detector (``.buildkite/scripts/quarantine``): per test and backend, the runs of the last
7 days; at least 5 of them with a failure rate strictly between 10 % and 90 % is flaky (under 10 % is
noise, over 90 % is broken, not flaky); a quarantined test whose last 5 runs in the window all passed has
earned its way back. The builds' reports are what the CI already keeps, so the harness applies that rule to
them and writes vLLM's ``quarantined_tests.json``: a file the run reads back as its quarantine.

The window ends at the newest report given (so an archive of last month's builds is judged as of then).
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from harness import quarantine
from harness.errors import ReportError
from harness.platform import VLLM_BACKENDS
from harness.report import store
from harness.report.schema import Report

MIN_RUNS = 5
LOW, HIGH = 0.1, 0.9  # failure rates strictly between these are flaky
WINDOW = datetime.timedelta(days=7)
BACK_AFTER = 5  # passes in a row that take a test out of quarantine
FAILED = ("failed", "error")
COUNTED = ("passed", *FAILED)  # a skipped test says nothing of flakiness


class Run(NamedTuple):
    """One test's outcome in one build."""

    test: str
    backend: str
    passed: bool
    when: datetime.datetime


def runs(report: Report) -> list[Run]:
    """A report's tests as runs on its platform's vLLM backend; skipped tests left out."""
    backend = VLLM_BACKENDS.get(report["platform"]["name"] or "", "other")
    stamp = report.get("started") or report.get("generated") or 0.0
    when = datetime.datetime.fromtimestamp(stamp, datetime.UTC)
    return [
        Run(test["nodeid"], backend, test["outcome"] == "passed", when)
        for test in report["tests"]
        if test.get("outcome") in COUNTED and isinstance(test.get("nodeid"), str)
    ]


def flaky(history: Iterable[Run], now: datetime.datetime) -> list[dict]:
    """vLLM's quarantine entries for the tests that are flaky in the window that ends at ``now``."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in history:
        if now - WINDOW <= run.when <= now:
            groups.setdefault((run.test, run.backend), []).append(run)
    entries = []
    for (test, backend), group in sorted(groups.items()):
        rate = sum(not run.passed for run in group) / len(group)
        if len(group) >= MIN_RUNS and LOW < rate < HIGH:
            entries.append(_entry(test, backend, rate, len(group), now))
    return entries


def _entry(test: str, backend: str, rate: float, total: int, now: datetime.datetime) -> dict:
    reason = f"Fail rate {rate:.0%} over {total} runs on {backend}"
    return {
        "test_id": test,
        "backend": backend,
        "quarantined_at": now.isoformat(),
        "fail_rate": round(rate, 4),
        "total_runs": total,
        "reason": reason,
    }


def back(entry: quarantine.Entry, history: Iterable[Run], now: datetime.datetime) -> bool:
    """Whether a quarantined test's last ``BACK_AFTER`` runs in the window all passed."""
    mine = sorted(
        (
            run
            for run in history
            if now - WINDOW <= run.when <= now
            and entry.platform in (None, run.backend)
            and entry.covers(run.test)
        ),
        key=lambda run: run.when,
    )
    return len(mine) >= BACK_AFTER and all(run.passed for run in mine[-BACK_AFTER:])


def main(args) -> int:
    reports = [store.load(path) for path in args.reports]
    if not reports:
        raise ReportError("harness flaky: no reports given")
    history = [run for report in reports for run in runs(report)]
    newest = max(report.get("started") or report.get("generated") or 0.0 for report in reports)
    now = datetime.datetime.fromtimestamp(newest, datetime.UTC)
    current = store.quarantine_list(args.quarantine) if args.quarantine else []
    kept = [entry for entry in current if not back(entry, history, now)]
    found = flaky(history, now)
    known = {(entry.test, entry.platform) for entry in current}  # one back from quarantine stays out
    added = [entry for entry in found if (entry["test_id"], entry["backend"]) not in known]
    entries = [_kept(entry) for entry in kept] + added
    document = {"generated_at": now.isoformat(), "entries": sorted(entries, key=_order)}
    text = json.dumps(document, indent=2) + "\n"
    if args.out:
        store.write_atomic(Path(args.out), text)
    else:
        sys.stdout.write(text)
    came_back = len(current) - len(kept)
    print(
        f"harness flaky: {len(reports)} reports, {len(entries)} quarantined ({len(added)} newly flaky), "
        f"{came_back} back from quarantine",
        file=sys.stderr,
    )
    return 0


def _kept(entry: quarantine.Entry) -> dict:
    """An entry that stays, as its file had it."""
    return dict(entry.raw) if entry.raw else {"test_id": entry.test, "backend": entry.platform or "other"}


def _order(entry: dict) -> tuple[str, str]:
    return entry["test_id"], entry["backend"]
