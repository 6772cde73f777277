"""Per-platform test timeouts where the user set none, on one timer per process, with pytest-timeout's
report (its failure message and thread stacks)."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from pytest_timeout import Settings, get_env_settings, timeout_sigalrm

_EFFECTIVE = pytest.StashKey[Settings]()


def default_timeout(config: pytest.Config, seconds: float) -> None:
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
    config.pluginmanager.register(Watchdog(default), "harness-timeouts")


def worker_fields(config: pytest.Config) -> dict:
    """The per-test timeout in force and its method, for the ledger's ``worker`` event: a worker that
    pytest-timeout's thread method ended can then be told apart."""
    settings = config.stash.get(_EFFECTIVE, None)
    return {} if settings is None else {"timeout": settings.timeout, "timeout_method": settings.method}


class Watchdog:
    """pytest-timeout's ``signal`` method without a timer per test.

    pytest-timeout installs a SIGALRM handler and arms an interval timer for every test and undoes both
    after it: most of a harness's per-test cost on trivial tests. Here a test's start only stores its
    deadline; the alarm is armed when no alarm is pending or this deadline comes sooner, and an alarm that
    finds a later deadline (a test started after it was armed) re-arms for the rest. A test past its
    deadline gets pytest-timeout's own handling (``timeout_sigalrm``: the stacks, its failure message).

    Deadlines come from pytest-timeout's override hooks where the user set a timeout (or a ``timeout``
    marker does), and from ``default`` (the platform's, when the user set none) for every other test; a
    test whose marker set none (``timeout(0)``) is looked up only when its default deadline passes.
    The ``thread`` method, and tests outside the main thread, stay with pytest-timeout's own timer.
    """

    def __init__(self, default: Settings | None) -> None:
        self.default = default
        self.item: pytest.Item | None = None
        self.settings: Settings | None = None
        self.deadline = 0.0
        self.alarm: float | None = None  # when the pending alarm fires (monotonic), None when none is

    def pytest_report_header(self) -> list[str] | None:
        if self.default is None:
            return None  # pytest-timeout's own header says it
        return [f"timeout: {self.default.timeout}s (the harness's default here)", "timeout method: signal"]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> None:
        """The default's deadline; after pytest-timeout's wrapper, which has set a marker's already."""
        if self.default is not None and self.item is not item:
            self._watch(item, self.default)

    def pytest_runtest_logfinish(self) -> None:
        if self.default is not None:
            self.item = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Settings) -> bool | None:
        if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
            return None
        self._watch(item, settings)
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_timeout_cancel_timer(self, item: pytest.Item) -> bool | None:
        if self.item is not item:
            return None  # pytest-timeout's own timer runs for this one, or none does
        self.item = None
        return True

    def _watch(self, item: pytest.Item, settings: Settings) -> None:
        self.item, self.settings = item, settings
        self.deadline = time.monotonic() + settings.timeout
        if self.alarm is None or self.deadline < self.alarm:
            self._arm(settings.timeout)

    def _arm(self, seconds: float) -> None:
        if signal.getsignal(signal.SIGALRM) != self._fired:  # once, or again after a test replaced it
            signal.signal(signal.SIGALRM, self._fired)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        self.alarm = time.monotonic() + seconds

    def _fired(self, signum, frame) -> None:
        __tracebackhide__ = True
        self.alarm = None
        if self.item is None:
            return
        remaining = self.deadline - time.monotonic()
        if remaining > 0:
            self._arm(remaining)
            return
        if self.settings is self.default and self.item.get_closest_marker("timeout") is not None:
            return  # a marker pytest-timeout set no timer for: timeout(0), the test's own "none"
        timeout_sigalrm(self.item, self.settings)

    def pytest_unconfigure(self) -> None:
        if self.alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            self.alarm = None
