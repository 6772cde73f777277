"""Each failing phase of a test gets its failure class (``harness.failures``) where the exception is still at
hand, as the report's ``failure_class`` user property: pytest's own channel, which travels with the report
from an xdist worker to the controller and which junitxml writes as the test case's property; the recorder
writes it into the test's ledger event and a rerun's record."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from harness import failures
from harness.pytest_plugin import quarantined
from harness.pytest_plugin.session import process_context

PATTERNS = pytest.StashKey[failures.Patterns]()
PROPERTY = "failure_class"


def pytest_configure(config: pytest.Config) -> None:
    # the settings' patterns were checked when they were loaded: compiling them again cannot fail
    config.stash[PATTERNS] = failures.patterns(process_context(config).settings.failure_patterns)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "setup":  # a further try of the test starts without the last try's class
        item.user_properties[:] = [entry for entry in item.user_properties if entry[0] != PROPERTY]
    if report.failed or _quarantined_failure(item, report, call):
        error = call.excinfo.value if call.excinfo is not None else None
        evidence = failures.Evidence(
            text=report.longreprtext,
            exceptions=failures.exception_names(error),
            when=report.when,
        )
        name = failures.classify(evidence, item.config.stash[PATTERNS])
        item.user_properties.append((PROPERTY, name))  # the teardown's report carries it to junitxml
        report.user_properties = [*report.user_properties, (PROPERTY, name)]
    return report


def _quarantined_failure(item: pytest.Item, report: pytest.TestReport, call: pytest.CallInfo[None]) -> bool:
    """A quarantined test's failure, which pytest's xfail has already turned into a skip."""
    marked = item.get_closest_marker(quarantined.MARK) is not None
    return marked and call.excinfo is not None and getattr(report, "wasxfail", None) is not None


def of(report: pytest.TestReport) -> str | None:
    """The class a failing report was given (None for one that passed or was made elsewhere)."""
    given = [value for name, value in report.user_properties if name == PROPERTY]
    return given[-1] if given and given[-1] in failures.CLASSES else None
