"""Per-platform test timeouts through pytest-timeout, where the user set none, on one timer per process."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from pytest_timeout import timeout_sigalrm


def default_timeout(config: pytest.Config, seconds: float) -> None:
    """The platform's per-test timeout when the user set none (``--timeout``, ini, ``PYTEST_TIMEOUT``);
    per-test timers on the ``Watchdog`` either way."""
    if not config.pluginmanager.hasplugin("timeout"):
        return
    if not config.pluginmanager.has_plugin("harness-timeouts"):
        config.pluginmanager.register(Watchdog(), "harness-timeouts")
    if (
        config.getoption("timeout") is not None
        or os.environ.get("PYTEST_TIMEOUT")
        or config.getini("timeout")
    ):
        return
    config.option.timeout = seconds


class Watchdog:
    """pytest-timeout's ``signal`` method without a timer per test, through its override hooks.

    pytest-timeout installs a SIGALRM handler and arms an interval timer for every test and undoes both
    after it: most of the harness's per-test cost on trivial tests. Here a test's start only stores its
    deadline; the alarm is armed when no alarm is pending or this deadline comes sooner, and an alarm that
    finds a later deadline (a test started after it was armed) re-arms for the rest. A test past its
    deadline gets pytest-timeout's own handling (``timeout_sigalrm``: the stacks, its failure message).
    The ``thread`` method, and tests outside the main thread, stay with pytest-timeout's own timer.
    """

    def __init__(self) -> None:
        self.item: pytest.Item | None = None
        self.settings = None
        self.deadline = 0.0
        self.alarm: float | None = None  # when the pending alarm fires (monotonic), None when none is

    @pytest.hookimpl(tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings) -> bool | None:
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
            return None  # pytest-timeout's own timer runs for this one
        self.item = None
        return True

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
        timeout_sigalrm(self.item, self.settings)

    def pytest_unconfigure(self) -> None:
        if self.alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            self.alarm = None
