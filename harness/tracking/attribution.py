"""Who owns a runner right now: the running test, the fixture being set up and its scope, worker, phase.

The pytest plugin moves this state through its hooks; runners and the admission check only read it,
so neither needs to know about pytest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Owner:
    """The attribution stamped on a runner start or a fixture that holds memory."""

    test: str | None
    file: str | None
    fixture: str | None
    scope: str | None
    worker: str
    phase: str | None

    def lifetime(self) -> str:
        """How long something created under this owner lives, and what would free it earlier."""
        if self.fixture is None:
            return f"created in the body of {self.test}; closing it before the test ends frees it"
        where = {
            "session": "lives until the end of the session",
            "package": f"lives until the end of the package of {self.file}",
            "module": f"lives until the end of {self.file}",
            "class": f"lives until the end of the class of {self.test}",
            "function": f"lives until the end of {self.test}",
        }.get(self.scope or "", f"lives as long as its {self.scope} scope")
        remedy = (
            "an explicit close before this test frees it"
            if self.scope in ("function", "class")
            else "class scope or an explicit close before this test frees it"
        )
        return f"fixture `{self.fixture}` is {self.scope}-scoped and {where}; {remedy}"


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
