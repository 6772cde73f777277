"""A run's quarantine: the ``[tool.harness] quarantine`` list, then vLLM's file it names, read once.

The pytest plugin reads it per session and ``harness run`` before its first phase, through the one loader
(``store.quarantine_list``): a missing or bad file is one ``HarnessError`` line, never one per phase.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from pathlib import Path

from harness import quarantine


def entries(listed: Iterable[object], file: str | None, root: Path, platform: str) -> list[quarantine.Entry]:
    """``platform``'s entries in list order (the settings', then the file's, from ``root``): the latest
    listed that covers a test decides for it."""
    found = quarantine.from_settings(listed)
    if file:
        from harness.report import store  # noqa: PLC0415 -- the loader's schema loads only where a file is read

        found += store.quarantine_list(root / Path(file))
    return [entry for entry in found if entry.on(platform)]


def held(found: list[quarantine.Entry], today: datetime.date | None = None) -> Callable[[str], bool]:
    """Whether a node id is quarantined today by ``found`` (its deciding entry holds)."""
    day = today or datetime.date.today()

    def check(nodeid: str) -> bool:
        entry = quarantine.deciding(nodeid, found)
        return entry is not None and entry.holds(day)

    return check
