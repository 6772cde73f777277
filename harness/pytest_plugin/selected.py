"""Selection in the session (``harness run --changed-since``; ``harness.select``): each test the run's
selection leaves out is skipped with the reason, so JUnit and report.json show it skipped by selection;
in shadow it runs, and its JUnit properties say selection would have skipped it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from harness.errors import HarnessError
from harness.select.record import REASON


class Selected:
    def __init__(self, listing: Mapping[str, Any]) -> None:
        self.mode, self.ref = listing["mode"], listing["ref"]
        self.skipped = frozenset(listing["skipped"])

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        why = f"{REASON} (no footprint meets the changes since {self.ref})"
        for item in items:
            if item.nodeid not in self.skipped:
                continue
            if self.mode == "shadow":
                item.user_properties.append(("harness_selection", f"shadow: would skip, {why}"))
            else:
                item.add_marker(pytest.mark.skip(reason=why))

    def pytest_report_header(self) -> str:
        verb = "would skip (shadow: they run)" if self.mode == "shadow" else "skips"
        return f"harness: selection since {self.ref} {verb} {len(self.skipped)} tests"


def load(path: str) -> Selected:
    """The run's list (``record.VARIABLE``), through the one loader (a FIFO, a device or a bad field is
    refused without blocking); unreadable: a usage error, never a silent full or empty run."""
    from harness.report.store import skipped_list  # noqa: PLC0415 -- its schema loads only here

    try:
        return Selected(skipped_list(path))
    except HarnessError as error:
        raise pytest.UsageError(f"harness: selection list: {error}") from None
