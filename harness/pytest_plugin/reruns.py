"""The one way the harness runs a test again, and the one record of it (the reuse safety net uses it;
a retry of another kind takes a ``Policy`` of its own, never a second mechanism).

A test runs pytest's own protocol, unlogged; while one of the session's policies (``add``: the reuse safety
net, a retry by failure class) says why it should run again it runs again (``begin``), and that policy
decides which try is the test's result (``verdict``): a passing try when the
test is rescued, else its first failing one, which is what a run without the retry would have said. Every
other try is logged as a ``rerun`` report first (the terminal's ``RERUN`` line, pytest-rerunfailures'
shape), and each try after the first is a ``rerun`` ledger event: the test, the try's number, outcome and
failure text, why it ran, the runner starts it made and the hand-ons it took (each with their seconds: a
retry's hand-on avoids no start a run without the retry makes), the first try's failure (what a run
without the retry reports), the test's final outcome, the try that counts and the policy's verdict.
report.json lists them as ``reruns``; junit.xml carries them as surefire's ``flakyFailure`` (the test
passed in the end) or ``rerunFailure`` (it did not).

Each try is a full one: its own timeout (``timeouts`` re-arms pytest-timeout's timer at each try's
set-up), its own fixtures (a fixture whose set-up failed, cached by pytest for its whole scope, is built
again) and its own outcome: a try that skipped is not a pass, so the first try's failure counts then.
A test that pytest-rerunfailures reruns (its ``flaky(reruns=N)`` marker, ``--reruns``) runs under that
plugin's protocol, as without the harness: the reruns its author gave it are kept (``author_reruns``),
and its tries go into the same record (``Marked``, policy ``pytest-rerunfailures``).
"""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any, NamedTuple, Protocol

import pytest
from _pytest.runner import runtestprotocol

from harness.ledger.writer import LedgerWriter
from harness.pytest_plugin import classes
from harness.tracking.context import current

LONGREPR_CHARS = 4000  # a rerun record keeps the end of its failure text: the assertion is last


class Try(NamedTuple):
    """One run of a test's protocol: its reports, why it ran ("" for the first), the runner starts it made
    and the starts reuse avoided in it (hand-ons), with their seconds."""

    reports: list[pytest.TestReport]
    why: str
    starts: int
    started_s: float
    reused: int
    reused_s: float

    @property
    def failed(self) -> bool:
        return self.failure() is not None

    def failure(self) -> pytest.TestReport | None:
        """Its failing report: a failed one, or one pytest-rerunfailures logged as ``rerun``."""
        return next((report for report in self.reports if report.failed or report.outcome == "rerun"), None)


class Verdict(NamedTuple):
    """Which try is the test's result (its index) and what the policy concluded, in a sentence."""

    counts: int
    why: str


class Policy(Protocol):
    """When a test runs again and which of its tries counts."""

    name: str  # in every record: which retry this was ("reuse")

    def begin(self, item: pytest.Item, number: int, tries: list[Try]) -> str | None:
        """Before try ``number`` (0 first; a later one only after a failed try): why it runs (None: it
        does not), once it is prepared; the first try runs whatever this returns."""

    def verdict(self, item: pytest.Item, tries: list[Try]) -> Verdict:
        """Once no try follows: the one that counts."""


POLICIES = pytest.StashKey[list[Policy]]()  # the session's, in the order they are asked


def add(config: pytest.Config, policy: Policy) -> None:
    """Make ``policy`` one of the session's: asked, after those added before it, whether a failed try runs
    again. Registers this module's hooks once."""
    config.stash.setdefault(POLICIES, []).append(policy)
    if not config.pluginmanager.is_registered(sys.modules[__name__]):
        config.pluginmanager.register(sys.modules[__name__], "harness-reruns")


def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """pytest's own protocol, run as often as the session's policies say (none: pytest runs it)."""
    policies = item.config.stash.get(POLICIES, [])
    writer = current().writer
    if not policies or writer is None or author_reruns(item):
        return None
    run(item, nextitem, policies, writer)
    return True


def run(
    item: pytest.Item, nextitem: pytest.Item | None, policies: list[Policy], writer: LedgerWriter
) -> list[Try]:
    """``item``'s protocol, run again while one of ``policies`` says why (the first that does), logged and
    recorded (see the module); the policy that asked for the last try gives the verdict."""
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    tries: list[Try] = []
    for policy in policies:
        policy.begin(item, 0, tries)
    why: str | None = ""
    asked = policies[0]
    while why is not None:
        tries.append(_try(item, nextitem, why))
        why = None
        for policy in policies if tries[-1].failed else ():
            if (why := policy.begin(item, len(tries), tries)) is not None:
                asked = policy
                break
    verdict = asked.verdict(item, tries) if len(tries) > 1 else Verdict(0, "")
    if verdict.counts and _skipped(tries[verdict.counts]):
        verdict = Verdict(0, f"try {verdict.counts + 1} skipped, which is not a pass: its first try counts")
    counted = tries[verdict.counts]
    for number, attempt in enumerate(tries):
        if number != verdict.counts:
            _log_rerun(item, attempt)
    for report in counted.reports:
        item.ihook.pytest_runtest_logreport(report=report)
    final = str(_failure(counted)["outcome"])
    for number in range(1, len(tries)):
        _record(writer, item.nodeid, tries, number, asked, final, verdict)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return tries


def author_reruns(item: pytest.Item) -> bool:
    """Whether pytest-rerunfailures reruns ``item`` (its marker or ``--reruns``): then it runs the test."""
    plugin = item.config.pluginmanager.get_plugin("rerunfailures")
    return plugin is not None and bool(plugin.get_reruns_count(item))


class Marked:
    """pytest-rerunfailures' tries of a test, in the one record: each try's reports as that plugin logs
    them (each carries ``rerun``, its try's index; a failed try's failing one the outcome ``rerun``), a
    ``rerun`` event per try after the first once the last one ends. Its verdict is that plugin's: the last
    try counts."""

    name = "pytest-rerunfailures"
    WHY = "pytest-rerunfailures reran it (its flaky marker or --reruns)"

    def __init__(self) -> None:
        self.tries: list[Try] = []
        self.reports: list[pytest.TestReport] = []
        self.before = (0, 0.0, 0, 0.0)

    def pytest_runtest_logstart(self) -> None:
        context = current()  # rerunfailures logs each try's start
        self.before = (context.starts, context.started_s, context.reused, context.reused_s)

    @pytest.hookimpl(tryfirst=True)  # while the test is still the ledger's owner
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        writer = current().writer
        if getattr(report, "rerun", None) is None or writer is None:
            return  # not pytest-rerunfailures' protocol
        self.reports.append(report)
        if report.when != "teardown":
            return
        context, before = current(), self.before
        self.tries.append(
            Try(
                self.reports,
                self.WHY if self.tries else "",
                context.starts - before[0],
                round(context.started_s - before[1], 3),
                context.reused - before[2],
                round(context.reused_s - before[3], 3),
            )
        )
        self.reports = []
        if any(r.outcome == "rerun" for r in self.tries[-1].reports):
            return  # another try follows
        tries, self.tries = self.tries, []
        last = len(tries) - 1
        ended = "failed on each" if tries[last].failed else "passed on the last"
        verdict = Verdict(last, f"it {ended} of {len(tries)} tries: pytest-rerunfailures reports its last")
        final = str(_failure(tries[last])["outcome"])
        for number in range(1, len(tries)):
            _record(writer, report.nodeid, tries, number, self, final, verdict)

    def begin(self, item: pytest.Item, number: int, tries: list[Try]) -> str | None:
        return None  # that plugin decides; a Policy for the record's sake

    def verdict(self, item: pytest.Item, tries: list[Try]) -> Verdict:
        return Verdict(len(tries) - 1, "")


def _skipped(attempt: Try) -> bool:
    return any(report.skipped for report in attempt.reports)


def _forget_failed_fixtures(item: pytest.Item) -> None:
    """Fixtures whose set-up failed are built again by the next try: pytest keeps a failed fixture's error
    for its whole scope (a module's) and raises it again to each test, a retry included. Each is finished
    (pytest's ``FixtureDef.finish``: its finalizers run, its cache cleared); pytest has no public table of
    an item's fixtures, so it is read where pytest-rerunfailures reads it (``_fixtureinfo``)."""
    info = getattr(item, "_fixtureinfo", None)
    for definitions in getattr(info, "name2fixturedefs", {}).values():
        for definition in definitions:
            cached = definition.cached_result
            if cached is not None and cached[2] is not None:
                # finish reads its request's node alone (to name it in an error); between tries pytest
                # has dropped the item's own request
                try:
                    definition.finish(request=SimpleNamespace(node=item))
                except Exception as error:  # its cache is cleared all the same: the retry builds it
                    message = f"fixture {definition.argname}'s finalizer failed before a retry: {error!r}"
                    item.warn(pytest.PytestWarning(message))


def _try(item: pytest.Item, nextitem: pytest.Item | None, why: str) -> Try:
    if why:
        _forget_failed_fixtures(item)
    context = current()
    before = (context.starts, context.started_s, context.reused, context.reused_s)
    reports = runtestprotocol(item, nextitem=nextitem, log=False)
    return Try(
        reports,
        why,
        context.starts - before[0],
        round(context.started_s - before[1], 3),
        context.reused - before[2],
        round(context.reused_s - before[3], 3),
    )


def _log_rerun(item: pytest.Item, attempt: Try) -> None:
    """One ``rerun`` report for a try that does not count: its failing phase's (the call's when it
    passed), never a teardown's (pytest's junitxml closes a test case there)."""
    shown = attempt.failure() or next((r for r in attempt.reports if r.when == "call"), attempt.reports[-1])
    rerun = pytest.TestReport(
        nodeid=shown.nodeid,
        location=shown.location,
        keywords=dict(shown.keywords),
        outcome="rerun",  # type: ignore[arg-type]
        longrepr=shown.longrepr,
        when="call" if shown.when == "teardown" else shown.when,
        sections=shown.sections,
        duration=shown.duration,
        start=shown.start,
        stop=shown.stop,
        user_properties=shown.user_properties,
    )
    item.ihook.pytest_runtest_logreport(report=rerun)


def _failure(attempt: Try) -> dict[str, Any]:
    """A try's outcome and, where it failed, the phase, the failure's line and its text (bounded)."""
    failure = attempt.failure()
    if failure is None:
        outcome = "skipped" if _skipped(attempt) else "passed"
        return {"outcome": outcome, "when": None, "message": None, "longrepr": None, "failure_class": None}
    crash = getattr(failure.longrepr, "reprcrash", None)
    text = failure.longreprtext.strip()
    message = crash.message.splitlines()[0] if crash is not None and crash.message else ""
    return {
        "outcome": "error" if failure.when != "call" else "failed",
        "when": failure.when,
        "message": message or (text.splitlines()[-1] if text else failure.when),
        "longrepr": text[-LONGREPR_CHARS:],
        # the class pytest_plugin.classes gave it, where that plugin ran (its user property)
        "failure_class": classes.of(failure),
    }


def _record(
    writer: LedgerWriter,
    test: str,
    tries: list[Try],
    number: int,
    policy: Policy,
    final: str,
    verdict: Verdict,
) -> None:
    """The ``rerun`` event of try ``number`` (0 first): why it ran, what it cost, how it ended, and the
    first try's failure (what a run without the retry reports)."""
    attempt, first = tries[number], _failure(tries[0])
    owner = current().owner.current()
    writer.write(
        "rerun",
        test=test,
        attempt=number + 1,
        **_failure(attempt),
        first_outcome=first["outcome"],
        first_message=first["message"],
        first_longrepr=first["longrepr"],
        first_failure_class=first["failure_class"],
        why=attempt.why,
        policy=policy.name,
        starts=attempt.starts,
        started_s=attempt.started_s,
        reused=attempt.reused,
        reused_s=attempt.reused_s,
        result=final,
        counts=verdict.counts + 1,
        verdict=verdict.why,
        file=owner.file,
        worker=owner.worker,
        phase=owner.phase,
    )


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, tuple[str, dict]] | None:
    """A try that does not count: ``R`` / ``RERUN`` in the terminal, as pytest-rerunfailures shows it."""
    if report.outcome == "rerun":
        return "rerun", "R", ("RERUN", {"yellow": True})
    return None
