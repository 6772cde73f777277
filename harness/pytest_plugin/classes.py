"""Each failing phase of a test gets its failure class (``harness.failures``) where the exception is still at
hand, as the report's ``failure_class`` user property: pytest's own channel, which travels with the report
from an xdist worker to the controller and which junitxml writes as the test case's property; the recorder
writes it into the test's ledger event and a rerun's record.

The evidence is the failure's own: its exceptions' types and messages, and whether pytest-timeout raised
it (its ``timeout_sigalrm`` is on the traceback of an exception of the chain, so a timeout that fired in
an ``except ConnectionError`` block is a timeout). The wrapper is the outermost, so a failure another
plugin makes of a report (the GPU-free job's "needs a GPU") gets its class too."""

from __future__ import annotations

from collections.abc import Generator

import pytest
from pytest_timeout import timeout_sigalrm

from harness import failures
from harness.pytest_plugin import quarantined
from harness.pytest_plugin.session import process_context

PATTERNS = pytest.StashKey[failures.Patterns]()
PROPERTY = failures.PROPERTY


def pytest_configure(config: pytest.Config) -> None:
    # the settings' patterns were checked when they were loaded: compiling them again cannot fail
    config.stash[PATTERNS] = failures.patterns(process_context(config).settings.failure_patterns)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    if call.when == "setup":  # a further try of the test starts without the last try's class
        item.user_properties[:] = [entry for entry in item.user_properties if entry[0] != PROPERTY]
    report = yield
    if report.failed or _quarantined_failure(item, report, call):
        given = [value for name, value in item.user_properties if name == PROPERTY]
        # one class a try: its first failing phase's, which decided its outcome (a teardown's after a
        # failed call does not replace it)
        name = given[0] if given else _classify(item, report, call)
        if not given:
            item.user_properties.append((PROPERTY, name))  # the teardown's report carries it to junitxml
        kept = [entry for entry in report.user_properties if entry[0] != PROPERTY]
        report.user_properties = [*kept, (PROPERTY, name)]
    return report


def _classify(item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None]) -> str:
    error = call.excinfo.value if call.excinfo is not None else None
    evidence = failures.Evidence(
        text=failures.messages(error) if error is not None else _plain(report),
        exceptions=failures.exception_names(error),
        when=report.when,
        timed_out=timed_out(error),
    )
    return failures.classify(evidence, item.config.stash[PATTERNS])


def timed_out(error: BaseException | None) -> bool:
    """Whether pytest-timeout raised ``error`` or an exception of its chain (its signal handler's frame)."""
    for each in failures.chain(error):
        frame = each.__traceback__
        while frame is not None:
            if frame.tb_frame.f_code is timeout_sigalrm.__code__:
                return True
            frame = frame.tb_next
    return False


def _plain(report: pytest.TestReport) -> str:
    """A report failed without an exception (by a plugin): its message, where it is one."""
    return report.longrepr if isinstance(report.longrepr, str) else ""


def _quarantined_failure(item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None]) -> bool:
    """A quarantined test's failure, which pytest's xfail has already turned into a skip."""
    marked = item.get_closest_marker(quarantined.MARK) is not None
    return marked and call.excinfo is not None and getattr(report, "wasxfail", None) is not None


def of(report: pytest.TestReport) -> str | None:
    """The class a failing report was given (None for one that passed or was made elsewhere)."""
    given = [value for name, value in report.user_properties if name == PROPERTY]
    return given[-1] if given and given[-1] in failures.CLASSES else None
