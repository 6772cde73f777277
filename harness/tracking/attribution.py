"""Who owns a runner right now: the running test, the fixture being set up and its scope, worker, phase.

The pytest plugin moves this state through its hooks; runners and the admission check only read it,
so neither needs to know about pytest.
"""

from __future__ import annotations

import os

from harness.ledger.records import Owner


class Attribution:
    """The owner of anything created now in this process; the pytest plugin moves it through its hooks."""

    def __init__(self, worker: str = "main") -> None:
        self.worker = worker  # the xdist worker id, or "main"
        self._test: tuple[str, str] | None = None  # (nodeid, file)
        self._fixtures: list[tuple[str, str]] = []  # (name, scope), innermost last

    def enter_test(self, nodeid: str, file: str) -> None:
        self._test = (nodeid, file)

    def leave_test(self) -> None:
        self._test = None
        self._fixtures.clear()

    def enter_fixture(self, name: str, scope: str) -> None:
        self._fixtures.append((name, scope))

    def leave_fixture(self) -> None:
        if self._fixtures:
            self._fixtures.pop()

    def current(self) -> Owner:
        """The innermost fixture in setup, else the test body."""
        nodeid, file = self._test or (None, None)
        fixture, scope = self._fixtures[-1] if self._fixtures else (None, None)
        return Owner(nodeid, file, fixture, scope, self.worker, os.environ.get("HARNESS_PHASE"))
