"""The reuse pool's view of the session: which test opted out (``fresh_engine``), which failed (what it
closes is not parked), the safety net, and the session's end (warm engines shut down, parked HF models
dropped). Registered by the recorder when reuse or HF reuse is asked for; the per-test modes and the net
only with engine reuse (``reuse``), the pool's close with either.

The safety net (``Net``, a ``reruns.Policy``): a test that fails after the pool handed it an engine may
have failed because of that engine, or for reasons of its own (order-dependent, failing on its first call
in a process, flaky). Without reuse the second kind fails, so with reuse it must too. The net tells them
apart by running the test again, each try in the open (``reruns``):

1. ``replay``: once more on the very engines it failed on (``Terms.held``). Passes: the engine is not why
   (the same engine serves it), so the failure is its own and the first try counts: **failed**.
2. ``fresh``: fails again, then on fresh engines. Passes: the failure follows the handed-on engine and
   leaves with it, so reuse caused it: **passed**, a ``reuse-sensitive`` finding (a run given this run's
   report as history starts the test on fresh engines). Fails: its own failure: **failed**.

A test the history (``HARNESS_CONFIGURATIONS``, a previous run's report) saw fail is not run again: its
failure costs no start (an ``own-failure`` finding says so). Where the engines could not be held for a
replay (the engine died; the pool gave them away), the second try is the fresh one.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from harness.config.variables import CONFIGURATIONS, SENSITIVE
from harness.pytest_plugin import reruns
from harness.report.marks import decode
from harness.tracking.context import current
from harness.tracking.handles import FRESH, FRESH_MARKER, LEAVE, REPLAY, TAKE, Terms

if TYPE_CHECKING:
    from harness.ledger.writer import LedgerWriter
    from harness.tracking.reuse import Pool

RETRY = "the test failed on a handed-on engine: it runs again on fresh engines"
REPLAYED = "the test failed on a handed-on engine: it runs again on that engine, to see whether it is why"
REMEMBERED = "the test failed on a handed-on engine in the run given as history (reuse-sensitive)"
OWN = "own-failure"  # the finding of a test whose failure the net found its own


class Reuse:
    """The one plugin that drives and closes the pool; ``modes``: each test's terms (``reuse.Terms``: its
    mode, whether it failed, what it was handed and held, its process and threads) and the safety net
    (engine reuse on), else the pool's close alone (HF reuse alone). The terms are this plugin's: it makes
    one per try, puts it on the process context for the adapters' parks and takes, fails and ends it."""

    def __init__(self, pool: Pool, writer: LedgerWriter, modes: bool = True):
        self.pool, self.writer, self.modes = pool, writer, modes
        self.test: Terms | None = None  # the running try's terms
        self.history = _history() if modes else {}
        self.sensitive = frozenset(t for t, v in self.history.items() if v == SENSITIVE)
        self.failing = frozenset(t for t, v in self.history.items() if decode(v).failed)
        self.net = Net(self)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Before the test's fixtures: they may build runners too."""
        if not self.modes:
            return
        mode, previous, fresh = self.net.mode, self.test, None
        if item.get_closest_marker("fresh_engine") is not None:
            test, fresh = Terms(item.nodeid, FRESH), FRESH_MARKER
        elif mode == REPLAY:  # on what its failed try was handed
            test = Terms(item.nodeid, REPLAY, previous.held if previous is not None else None)
        elif mode == LEAVE or item.nodeid in self.sensitive:  # what it starts may stay warm after it
            test, fresh = Terms(item.nodeid, LEAVE), RETRY if mode == LEAVE else REMEMBERED
        else:
            test = Terms(item.nodeid)
        self.test = current().test = test
        self.pool.begin(test, previous, fresh)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if report.failed and self.test is not None:  # before its teardown closes what it used
            self.pool.failed(self.test)
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item):
        """After its fixtures' teardown: what threads it left running can reach is not kept warm."""
        yield
        if self.test is not None:
            self.pool.ended(self.test)

    def pytest_runtest_logfinish(self) -> None:
        """The test's tries are over (``reruns``): the engines held for its replay go."""
        if self.test is None:
            return
        self.net.mode = TAKE
        self.pool.let_go(self.test)

    def pytest_sessionfinish(self) -> None:
        """Parked runners are stopped (and their stops recorded) while the ledger is still open."""
        self.pool.close(self.test)


class Net:
    """The safety net as a ``reruns.Policy`` (see the module): which try comes next, and which counts."""

    name = "reuse"

    def __init__(self, reuse: Reuse) -> None:
        self.reuse, self.mode = reuse, TAKE

    def begin(self, item: pytest.Item, number: int, tries: list[reruns.Try]) -> str | None:
        pool = self.reuse.pool
        if number == 0:
            self.mode = TAKE
            return None
        if number == 1:
            test = self.reuse.test
            handed = test is not None and test.handed
            if not handed and not tries[0].reused:  # nothing handed on (an engine, an HF model)
                return None
            if item.nodeid in self.reuse.failing:
                self._said(
                    item.nodeid,
                    tries[0],
                    "it failed in the run given as history too, so it is not run "
                    "again: its own failure, no extra start",
                )
                return None
            if test is not None and pool.replayable(test):  # what it failed on, still there
                self.mode = REPLAY
                return REPLAYED
            self.mode = LEAVE
            return RETRY + " (the engine it failed on could not be kept for a replay)"
        if self.mode == REPLAY:
            self.mode = LEAVE
            return RETRY + " (it failed on the same engine again)"
        return None

    def verdict(self, item: pytest.Item, tries: list[reruns.Try]) -> reruns.Verdict:
        last = tries[-1]
        replayed = len(tries) > 2
        if not last.failed and len(tries) == 2 and self.mode == REPLAY:
            why = (
                "it failed on a handed-on engine, then passed on that same engine: the engine is not why, "
                "so the failure is its own and its first try counts"
            )
            self._said(item.nodeid, tries[0], why)
            return reruns.Verdict(0, why)
        if not last.failed:
            why = (
                "it failed on a handed-on engine"
                + (" twice" if replayed else "")
                + " and passed on fresh engines: reuse caused the failure"
            )
            self._sensitive(item.nodeid, tries[0])
            return reruns.Verdict(len(tries) - 1, why)
        why = "it failed on fresh engines too: its own failure, and its first try counts"
        self._said(item.nodeid, tries[0], why)
        return reruns.Verdict(0, why)

    def _said(self, test: str, first: reruns.Try, why: str) -> None:
        self.reuse.writer.write(
            "finding", type=OWN, test=test, message=f"{test} failed ({_last_line(first)}); {why}"
        )

    def _sensitive(self, test: str, first: reruns.Try) -> None:
        self.reuse.writer.write(
            "finding",
            type=SENSITIVE,
            test=test,
            message=f"{test} failed on a handed-on engine and passed on fresh ones ({_last_line(first)}): "
            "the next run with this run's report as history gives it fresh engines",
        )


def _last_line(attempt: reruns.Try) -> str:
    failure = attempt.failure()
    if failure is None:
        return "passed"
    crash = getattr(failure.longrepr, "reprcrash", None)
    lines = failure.longreprtext.strip().splitlines()
    return (
        crash.message.splitlines()[0]
        if crash is not None and crash.message
        else lines[-1]
        if lines
        else failure.when
    )


def _history() -> dict[str, str]:
    """What the history (``HARNESS_CONFIGURATIONS``) says of each test: its configuration, or that it is
    ``reuse-sensitive`` or that it failed (``failed``)."""
    path = os.environ.get(CONFIGURATIONS)
    if not path:
        return {}
    from harness.pytest_plugin import order

    return order.load(path)
