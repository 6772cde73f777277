"""Who owns a runner right now: the running test, the fixture being set up and its scope, worker, phase.

The pytest plugin moves this state through its hooks; runners and the admission check only read it,
so neither needs to know about pytest.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.ledger.owner import Owner

# set by the plugin for its session: the ledger and worker a process a test spawns records under (vLLM's
# spawn_new_process_for_each_test runs the test body in a fresh interpreter that no plugin configures); the
# test comes from that worker's ledger, so the plugin need not rewrite the environment for every test
CHILD = "HARNESS_TEST_PROCESS"
# the fixture in setup while it spawns (``<scope> <name>``): a module-scoped fixture that runs ``vllm serve``
# owns the server's engine; set only around a fixture's setup in a session that exports ``CHILD``
FIXTURE = "HARNESS_TEST_FIXTURE"


class Attribution:
    """The owner of anything created now in this process; the pytest plugin moves it through its hooks."""

    def __init__(self, worker: str = "main") -> None:
        self.worker = worker  # the xdist worker id, or "main"
        self._test: tuple[str, str] | None = None  # (nodeid, file)
        self._since = 0.0  # when it started
        self._fixtures: list[tuple[str, str]] = []  # (name, scope), innermost last

    def enter_test(self, nodeid: str, file: str) -> None:
        self._test = (nodeid, file)
        self._since = time.monotonic()

    def running(self) -> tuple[str, float] | None:
        """The running test's node id and when it started (``time.monotonic``): the default timeout's
        deadline is read from it, so no hook of its own runs for every test."""
        return None if self._test is None else (self._test[0], self._since)

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
        from harness.ledger.owner import Owner  # at the first runner or held fixture, not in every session

        nodeid, file = self._test or (None, None)
        fixture, scope = self._fixtures[-1] if self._fixtures else (None, None)
        return Owner(nodeid, file, fixture, scope, self.worker, self.phase)

    @property
    def phase(self) -> str | None:
        """The ``harness run`` phase this process runs in (``HARNESS_PHASE``), None outside one."""
        return os.environ.get("HARNESS_PHASE")

    def export(self, ledger_dir: str) -> str:
        """``CHILD``'s value, for the processes this session's tests spawn."""
        return json.dumps({"ledger": ledger_dir, "worker": self.worker})

    def adopt(self, value: str) -> str:
        """In a spawned process: own what starts here as the test its parent is running; returns the
        ledger."""
        from harness.ledger.reader import running_test  # a spawned process reads its parent's ledger

        found = json.loads(value)
        self.worker = found["worker"]
        self._test = running_test(Path(found["ledger"]) / f"{self.worker}.jsonl")
        scope, _, name = os.environ.get(FIXTURE, "").partition(" ")
        if name:
            self._fixtures = [(name, scope)]
        return found["ledger"]
