"""``harness flaky REPORT...``: the tests whose recent builds make them flaky, by vLLM's quarantine rule.

vLLM's CI keeps a detector (``.buildkite/scripts/quarantine``): per test and backend, the runs of the last
7 days; at least 5 of them with a failure rate strictly between 10 % and 90 % is flaky (under 10 % is
noise, over 90 % is broken, not flaky); a quarantined test whose last 5 runs in the window all passed has
earned its way back. The builds' reports are what the CI already keeps, so the harness applies that rule to
them and writes vLLM's ``quarantined_tests.json``: a file the run reads back as its quarantine.

Every try of every build counts once: a retried test's failed tries and its retries (a test passing only on
a retry is flaky), a quarantined test's failures (pytest's xfail, recorded as ``skipped`` with a failure
class); a build given twice, under any path, merged or as its shards or both, counts once (``builds``).
The window ends at the newest report given (so an archive of last month's builds is judged as of then).
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Iterable
from typing import NamedTuple

from harness import quarantine
from harness.errors import ReportError
from harness.platform import VLLM_BACKENDS
from harness.report import out, store
from harness.report.schema import Report, Rerun
from harness.report.union import merged_from

MIN_RUNS = 5
LOW, HIGH = 0.1, 0.9  # failure rates strictly between these are flaky
WINDOW = datetime.timedelta(days=7)
BACK_AFTER = 5  # passes in a row that take a test out of quarantine
FAILED = ("failed", "error")


class Run(NamedTuple):
    """One try of a test in one build."""

    test: str
    backend: str
    passed: bool
    when: datetime.datetime


def runs(report: Report) -> list[Run]:
    """Every try of a report's tests, as runs on its platform's vLLM backend: a retried test's first try
    and each retry (its ``reruns``), so a test passing only on a retry has a failed run; a quarantined
    test's failure (recorded as ``skipped`` with its failure class) is a failed run. A skipped try says
    nothing of flakiness and is left out."""
    backend = VLLM_BACKENDS.get(report["platform"]["name"] or "", "other")
    when = datetime.datetime.fromtimestamp(_stamp(report), datetime.UTC)
    retried: dict[tuple[str, str | None], list[Rerun]] = {}
    for rerun in report.get("reruns", []):
        retried.setdefault((rerun["test"], rerun.get("phase")), []).append(rerun)
    found = []
    for test in report["tests"]:
        tries = retried.pop((test["nodeid"], test.get("phase")), None)
        outcomes = _tries(tries) if tries else [(test["outcome"], test.get("failure_class"))]
        found += [
            Run(test["nodeid"], backend, passed, when)
            for passed in map(_passed, outcomes)
            if passed is not None
        ]
    for (nodeid, _), tries in retried.items():  # retries of a test whose own event is missing (a crash)
        found += [
            Run(nodeid, backend, passed, when) for passed in map(_passed, _tries(tries)) if passed is not None
        ]
    return found


def _tries(reruns: list[Rerun]) -> list[tuple[str, object]]:
    """A retried test's tries in order: the first (as every retry's record keeps it), then each retry."""
    ordered = sorted(reruns, key=lambda rerun: rerun["attempt"])
    first = ordered[0]
    tries: list[tuple[str, object]] = [(first["first_outcome"], first.get("first_failure_class"))]
    return tries + [(rerun["outcome"], rerun.get("failure_class")) for rerun in ordered]


def _passed(outcome: tuple[str, object]) -> bool | None:
    """A try's verdict: passed, failed (a quarantined failure is pytest's xfail, ``skipped`` with a failure
    class), or None for a try that skipped."""
    word, failure_class = outcome
    if word == "passed":
        return True
    if word in FAILED or (word == "skipped" and failure_class):
        return False
    return None


def _stamp(report: Report) -> float:
    return report.get("started") or report.get("generated") or 0.0


def identity(report: Report, name: str = "report") -> frozenset[tuple]:
    """The builds' parts a report holds: per report it was made of (``union.merged_from``: a merged
    report's shards, else itself) its suite, platform, commit, shard and start (its own time when it has
    none), whatever path or copy it was given as; ``harness report`` run again on one run directory makes
    the same part."""
    commit = (report.get("versions") or {}).get("git_commit")
    return frozenset(
        (
            report.get("suite"),
            report["platform"]["name"],
            commit,
            part["shard"],
            part["started"] or part["generated"],
        )
        for part in merged_from(report, name)
    )


def builds(given: list[Report], names: list[str]) -> list[Report]:
    """The reports whose tries count, each build's once: a report given twice (any path, any copy) once,
    a shard given beside the merged report it is part of once (the merged report's). Reports that share
    some of their parts but not all cannot be told apart: one ``ReportError`` line."""
    parts = [identity(report, name) for report, name in zip(given, names, strict=True)]
    kept: list[int] = []
    for index in sorted(range(len(given)), key=lambda i: -len(parts[i])):  # merged reports first
        if parts[index] <= frozenset().union(*(parts[i] for i in kept)):
            continue  # every part already counted
        shared = next((i for i in kept if parts[i] & parts[index]), None)
        if shared is not None:
            raise ReportError(
                f"{names[index]} and {names[shared]} hold some of the same shard reports, not all: "
                "give each build once, merged or as its shards"
            )
        kept.append(index)
    return [given[i] for i in sorted(kept)]


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
    given = [store.load(path) for path in args.reports]
    if not given:
        raise ReportError("harness flaky: no reports given")
    reports = builds(given, [str(path) for path in args.reports])
    history = [run for report in reports for run in runs(report)]
    now = datetime.datetime.fromtimestamp(max(map(_stamp, reports)), datetime.UTC)
    current = store.quarantine_list(args.quarantine) if args.quarantine else []
    kept = [entry for entry in current if not back(entry, history, now)]
    found = flaky(history, now)
    known = {(entry.test, entry.platform) for entry in current}  # one back from quarantine stays out
    added = [entry for entry in found if (entry["test_id"], entry["backend"]) not in known]
    entries = [_kept(entry) for entry in kept] + added
    document = {"generated_at": now.isoformat(), "entries": sorted(entries, key=_order)}
    text = json.dumps(document, indent=2) + "\n"
    if args.out:
        out.write(args.out, text, inputs=args.reports)  # never over a report it reads
    else:
        sys.stdout.write(text)
    came_back = len(current) - len(kept)
    twice = f" ({len(given) - len(reports)} given twice, counted once)" if len(given) > len(reports) else ""
    print(
        f"harness flaky: {len(reports)} reports{twice}, {len(entries)} quarantined ({len(added)} newly "
        f"flaky), {came_back} back from quarantine",
        file=sys.stderr,
    )
    return 0


def _kept(entry: quarantine.Entry) -> dict:
    """An entry that stays, as its file had it."""
    return dict(entry.raw) if entry.raw else {"test_id": entry.test, "backend": entry.platform or "other"}


def _order(entry: dict) -> tuple[str, str]:
    return entry["test_id"], entry["backend"]
