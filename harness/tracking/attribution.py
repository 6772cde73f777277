"""Who owns a runner right now: the running test, the fixture being set up and its scope, worker, phase.

The pytest plugin moves this state through its hooks; runners and the admission check only read it,
so neither needs to know about pytest.
"""

from __future__ import annotations

import os

from harness.ledger.records import Owner

_worker = "main"  # the xdist worker id, or "main"; set once per session by the plugin
_test: tuple[str, str] | None = None  # (nodeid, file)
_fixtures: list[tuple[str, str]] = []  # (name, scope), innermost last


def set_worker(name: str) -> None:
    global _worker
    _worker = name


def enter_test(nodeid: str, file: str) -> None:
    global _test
    _test = (nodeid, file)


def leave_test() -> None:
    global _test
    _test = None
    _fixtures.clear()


def enter_fixture(name: str, scope: str) -> None:
    _fixtures.append((name, scope))


def leave_fixture() -> None:
    if _fixtures:
        _fixtures.pop()


def current() -> Owner:
    """The owner of anything created now: the innermost fixture in setup, else the test body."""
    nodeid, file = _test or (None, None)
    fixture, scope = _fixtures[-1] if _fixtures else (None, None)
    return Owner(nodeid, file, fixture, scope, _worker, os.environ.get("HARNESS_PHASE"))
