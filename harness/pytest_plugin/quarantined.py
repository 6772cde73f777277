"""Quarantined tests still run and are reported; their failures do not fail the run.

pytest's own non-strict ``xfail`` does exactly that, so a quarantined test gets one, with the entry's source
and reason: a failure shows as XFAIL, a pass as XPASS, and neither changes pytest's exit status; a crash
under xdist (its worker died: no xfail saw it) is made the same xfail. The report records a quarantined
failure as ``skipped`` with its failure class. The latest listed entry for a test decides
(``harness.quarantine``); after collection the run says how many of the selected tests are quarantined and
which entries past their date decide for one (their tests gate again).
"""

from __future__ import annotations

import datetime
from collections.abc import Generator

import pytest

from harness import quarantine
from harness.errors import HarnessError
from harness.pytest_plugin.session import process_context
from harness.report import quarantine_list

ENTRIES = pytest.StashKey[list[quarantine.Entry]]()
DECIDED = pytest.StashKey[quarantine.Decided]()
MARK = "harness_quarantined"  # the marker's name on a quarantined item (the recorder looks for it)


def entries(config: pytest.Config) -> list[quarantine.Entry]:
    """This platform's entries, in list order (the settings', then the file's: the latest decides)."""
    here = process_context(config)
    settings = here.settings
    try:
        return quarantine_list.entries(
            settings.quarantine, settings.quarantine_file, config.rootpath, here.platform.name
        )
    except HarnessError as error:
        raise pytest.UsageError(str(error)) from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARK}(source, reason): quarantined by the harness (do not use)")
    config.stash[ENTRIES] = entries(config)


def _decided(config: pytest.Config, nodeids: list[str]) -> quarantine.Decided:
    found: list[quarantine.Entry] = config.stash[ENTRIES]
    config.stash[DECIDED] = quarantine.decide(nodeids, found, datetime.date.today())
    return config.stash[DECIDED]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.stash[ENTRIES]:
        return
    held = _decided(config, [item.nodeid for item in items]).held
    for item in items:
        entry = held.get(item.nodeid)
        if entry is not None:
            item.add_marker(getattr(pytest.mark, MARK)(entry.source, entry.reason))
            item.add_marker(pytest.mark.xfail(reason=_why(entry), strict=False), append=False)


def _why(entry: quarantine.Entry) -> str:
    return f"quarantined ({entry.source}){': ' + entry.reason if entry.reason else ''}"


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """The suite's selected tests under quarantine, counted after collection (not the list's entries)."""
    decided = config.stash.get(DECIDED, None)
    return decided.lines() if decided is not None else []


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids: list[str]) -> None:
    """xdist's controller collects nothing itself: it counts the tests its first worker collected."""
    config = node.config
    if config.stash[ENTRIES] and DECIDED not in config.stash:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        for said in _decided(config, list(ids)).lines():
            if reporter is not None:
                reporter.write_line(said)


def held(report: pytest.TestReport) -> quarantine.Entry | None:
    """The entry that quarantines the test of xdist's crash ``report`` (None: it gates), as the session
    decided after collection: one answer for the controller's ``crash`` event and the report's xfail."""
    config = getattr(getattr(report, "node", None), "config", None)  # xdist's: the worker it came from
    decided = config.stash.get(DECIDED, None) if isinstance(config, pytest.Config) else None
    return decided.held.get(report.nodeid) if decided is not None else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> Generator[None, None, None]:
    """A quarantined test's failure that pytest's xfail never saw (its xdist worker died under it, and the
    controller reports the crash) does not gate either: before any hook counts it, it is made the xfail
    the test's own failure is."""
    entry = held(report)
    if entry is not None and report.failed and not hasattr(report, "wasxfail"):
        report.outcome = "skipped"
        report.wasxfail = _why(entry)
    return (yield)
