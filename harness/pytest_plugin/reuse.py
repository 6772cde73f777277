"""The reuse pools' view of the session: which test opted out (``fresh_engine``), which failed (what it
closes is not parked), the safety net, and the session's end (warm engines shut down, kept HF models
dropped). Registered by the recorder only when reuse is asked for.

The safety net: a test that fails after the pool handed it an engine is run again once, at once, on fresh
engines. Only the try that counts is reported (one result in the terminal and in JUnit): the fresh one. If
that passes, a ``reuse-sensitive`` finding names the test, and a run given this run's report as history
(``--durations-from``) starts that test on fresh engines without trying a warm one first.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from _pytest.runner import runtestprotocol

from harness.config.variables import CONFIGURATIONS, SENSITIVE
from harness.tracking.reuse import FRESH_MARKER

if TYPE_CHECKING:
    from harness.ledger.writer import LedgerWriter
    from harness.tracking.reuse import Keeper, Pool

RETRY = "the test failed on a handed-on engine: it runs again on fresh engines"
REMEMBERED = "the test failed on a handed-on engine in the run given as history (reuse-sensitive)"


class Reuse:
    def __init__(self, pool: Pool, writer: LedgerWriter):
        self.pool, self.writer = pool, writer
        self.retrying = False
        self.sensitive = _sensitive()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Before the test's fixtures: they may build runners too."""
        if item.get_closest_marker("fresh_engine") is not None:
            self.pool.next_test(item.nodeid, FRESH_MARKER)
        elif self.retrying or item.nodeid in self.sensitive:  # what it starts may stay warm after it
            self.pool.next_test(item.nodeid, RETRY if self.retrying else REMEMBERED, leave=True)
        else:
            self.pool.next_test(item.nodeid)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if report.failed:  # before its teardown closes what it used
            self.pool.test_failed(item.nodeid)
        return report

    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool:
        """pytest's own protocol, run once more on fresh engines when a handed-on engine may be why the
        test failed; the reports of the try that counts are logged."""
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        if self.pool.handed and any(report.failed for report in reports):
            first = next(report for report in reports if report.failed)
            self.retrying = True
            try:
                reports = runtestprotocol(item, nextitem=nextitem, log=False)
            finally:
                self.retrying = False
            if not any(report.failed for report in reports):
                self._sensitive(item.nodeid, first)
        for report in reports:
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _sensitive(self, test: str, failure: pytest.TestReport) -> None:
        crash = getattr(failure.longrepr, "reprcrash", None)
        lines = failure.longreprtext.strip().splitlines()
        last = crash.message.splitlines()[0] if crash is not None else lines[-1] if lines else failure.when
        self.writer.write(
            "finding",
            type=SENSITIVE,
            test=test,
            message=f"{test} failed on a handed-on engine and passed on fresh ones ({last}): the next run "
            "with this run's report as history gives it fresh engines",
        )

    def pytest_sessionfinish(self) -> None:
        """Warm engines are shut down (and their stops recorded) while the ledger is still open."""
        self.pool.close()


def _sensitive() -> frozenset[str]:
    """Tests the history (``HARNESS_CONFIGURATIONS``) marks ``reuse-sensitive``."""
    path = os.environ.get(CONFIGURATIONS)
    if not path:
        return frozenset()
    from harness.pytest_plugin import order

    return frozenset(test for test, value in order.load(path).items() if value == SENSITIVE)


class Closing:
    """A keeper's runners go at the session's end (kept HF models), their stops recorded before the summary
    reads them."""

    def __init__(self, keeper: Keeper) -> None:
        self.keeper = keeper

    def pytest_sessionfinish(self) -> None:
        self.keeper.close()
