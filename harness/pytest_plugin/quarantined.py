"""Quarantined tests still run and are reported; their failures do not fail the run.

pytest's own non-strict ``xfail`` does exactly that, so a quarantined test gets one, with the entry's source
and reason: a failure shows as XFAIL, a pass as XPASS, and neither changes pytest's exit status. The
recorder writes the truth beside it (``failed`` or ``passed``, and ``quarantined``). Entries past their
date are said in the header: their tests gate again.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from harness import quarantine
from harness.errors import HarnessError
from harness.pytest_plugin.session import process_context

ENTRIES = pytest.StashKey[list[quarantine.Entry]]()
EXPIRED = pytest.StashKey[list[quarantine.Entry]]()
MARK = "harness_quarantined"  # the marker's name on a quarantined item (the recorder looks for it)


def entries(
    config: pytest.Config, today: datetime.date
) -> tuple[list[quarantine.Entry], list[quarantine.Entry]]:
    """This platform's entries that hold today, and those past their date."""
    here = process_context(config)
    settings = here.settings
    try:
        found = quarantine.from_settings(settings.quarantine)
        if settings.quarantine_file:
            from harness.report import store  # noqa: PLC0415 -- the loader's schema loads only where a file is read

            found += store.quarantine_list(config.rootpath / Path(settings.quarantine_file))
    except HarnessError as error:
        raise pytest.UsageError(str(error)) from None
    return quarantine.active(found, here.platform.name, today), quarantine.expired(found, today)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARK}(source, reason): quarantined by the harness (do not use)")
    config.stash[ENTRIES], config.stash[EXPIRED] = entries(config, datetime.date.today())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    held = config.stash[ENTRIES]
    if not held:
        return
    for item in items:
        entry = quarantine.match(item.nodeid, held)
        if entry is not None:
            why = f"quarantined ({entry.source}){': ' + entry.reason if entry.reason else ''}"
            item.add_marker(getattr(pytest.mark, MARK)(entry.source, entry.reason))
            item.add_marker(pytest.mark.xfail(reason=why, strict=False), append=False)


def pytest_report_header(config: pytest.Config) -> list[str]:
    held, gone = config.stash.get(ENTRIES, []), config.stash.get(EXPIRED, [])
    lines = [f"harness: {len(held)} quarantined tests run without gating"] if held else []
    lines += [f"harness: quarantine of {entry.test} ended {entry.until}: it gates again" for entry in gone]
    return lines
