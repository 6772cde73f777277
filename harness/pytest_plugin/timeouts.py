"""Per-platform test timeouts where the user set none, on one timer per process, with pytest-timeout's
report (its failure message and thread stacks)."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from pytest_timeout import Settings, get_env_settings, timeout_sigalrm

from harness.tracking.attribution import Attribution

_EFFECTIVE = pytest.StashKey[Settings]()


def default_timeout(config: pytest.Config, seconds: float, owner: Attribution) -> None:
    """The platform's per-test timeout when the user set none (``--timeout``, ``PYTEST_TIMEOUT``, ini).

    With pytest-timeout's ``signal`` method the ``Watchdog`` arms it itself, so a test costs no
    pytest-timeout timer hooks; with the ``thread`` method pytest-timeout's own timer takes it.
    """
    if not config.pluginmanager.hasplugin("timeout") or config.pluginmanager.has_plugin("harness-timeouts"):
        return
    try:
        settings = get_env_settings(config)
    except ValueError:  # a malformed value: pytest-timeout's own configure reports it
        return
    default = None
    if settings.timeout is None:
        settings = settings._replace(timeout=seconds)
        if settings.method == "signal" and threading.current_thread() is threading.main_thread():
            default = settings
        else:
            config.option.timeout = seconds
    config.stash[_EFFECTIVE] = settings
    config.pluginmanager.register(Watchdog(default, owner), "harness-timeouts")


def worker_fields(config: pytest.Config) -> dict:
    """The per-test timeout in force and its method, for the ledger's ``worker`` event: a worker that
    pytest-timeout's thread method ended can then be told apart."""
    settings = config.stash.get(_EFFECTIVE, None)
    return {} if settings is None else {"timeout": settings.timeout, "timeout_method": settings.method}


class Watchdog:
    """pytest-timeout's ``signal`` method on one alarm per process, with no hook of its own per test.

    pytest-timeout installs a SIGALRM handler and arms an interval timer for every test and undoes both
    after it: most of a harness's per-test cost on trivial tests. Here the platform's default is armed once,
    when the tests are collected; when the alarm fires, it reads the running test and its start from the
    process's attribution (which the recorder moves for every test anyway) and re-arms for what is left of
    that test's time, or for the whole default when none runs. A test past its deadline gets pytest-timeout's
    own handling (``timeout_sigalrm``: the stacks, its failure message).

    Where the user set a timeout (or a ``timeout`` marker does), pytest-timeout's override hooks hand that
    test's deadline here, and it governs the test instead of the default; a test whose marker set none
    (``timeout(0)``) is looked up only when its default deadline passes. The ``thread`` method, and tests
    outside the main thread, stay with pytest-timeout's own timer.
    """

    def __init__(self, default: Settings | None, owner: Attribution) -> None:
        self.default, self.owner = default, owner
        self.items: list[pytest.Item] = []
        self.item: pytest.Item | None = None  # a test whose own timeout pytest-timeout handed here
        self.settings: Settings | None = None
        self.deadline = 0.0
        self.alarm: float | None = None  # when the pending alarm fires (monotonic), None when none is
        self.found: tuple | None = None  # SIGALRM's handler and time left before this one's, and when

    def pytest_report_header(self) -> list[str] | None:
        if self.default is None:
            return None  # pytest-timeout's own header says it
        return [f"timeout: {self.default.timeout}s (the harness's default here)", "timeout method: signal"]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Where tests run (never in the xdist controller, which collects none itself)."""
        self.items = session.items
        if self.default is not None:
            self._arm(self.default.timeout)

    @pytest.hookimpl(tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Settings) -> bool | None:
        if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
            return None
        self.item, self.settings = item, settings
        self.deadline = time.monotonic() + settings.timeout
        if self.alarm is None or self.deadline < self.alarm:
            self._arm(settings.timeout)
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_timeout_cancel_timer(self, item: pytest.Item) -> bool | None:
        if self.item is not item:
            return None  # pytest-timeout's own timer runs for this one, or none does
        self.item = None
        return True

    def _arm(self, seconds: float) -> None:
        if signal.getsignal(signal.SIGALRM) != self._fired:  # once, or again after a test replaced it
            if self.found is None:  # what an outer session (pytester in process) had: given back at the end
                remaining = signal.getitimer(signal.ITIMER_REAL)[0]
                self.found = (signal.getsignal(signal.SIGALRM), remaining, time.monotonic())
            signal.signal(signal.SIGALRM, self._fired)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        self.alarm = time.monotonic() + seconds

    def _due(self) -> tuple[pytest.Item | str | None, Settings | None, float]:
        """The running test (an item, or the node id of one on the default), its settings and deadline."""
        if self.item is not None:
            return self.item, self.settings, self.deadline
        running = self.owner.running()
        if running is None or self.default is None:
            return None, None, 0.0
        nodeid, since = running
        return nodeid, self.default, since + self.default.timeout

    def _fired(self, signum, frame) -> None:
        __tracebackhide__ = True
        self.alarm = None
        test, settings, deadline = self._due()
        remaining = deadline - time.monotonic()
        if test is not None and remaining > 0:
            self._arm(remaining)
            return
        if self.default is not None:  # the tests after this one
            self._arm(self.default.timeout)
        item = self._on_default(test) if isinstance(test, str) else test
        if item is not None:
            timeout_sigalrm(item, settings)

    def _on_default(self, nodeid: str) -> pytest.Item | None:
        """This session's item of ``nodeid``; None for one not this session's, or one whose ``timeout``
        marker pytest-timeout set no timer for (``timeout(0)``)."""
        item = next((item for item in self.items if item.nodeid == nodeid), None)
        return None if item is None or item.get_closest_marker("timeout") is not None else item

    def pytest_unconfigure(self) -> None:
        """The alarm is left as this session found it: an outer session's watchdog keeps its deadline."""
        if self.found is None:
            return
        handler, remaining, at = self.found
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, handler if handler is not None else signal.SIG_DFL)
        if remaining:  # what was left of it, less this session's time (at least a moment: 0 would disarm)
            signal.setitimer(signal.ITIMER_REAL, max(remaining - (time.monotonic() - at), 1e-3))
        self.found = self.alarm = None
