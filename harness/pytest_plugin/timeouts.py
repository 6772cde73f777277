"""The platform's per-test timeout, through pytest-timeout's own option, where the user set none.

pytest-timeout reads its settings in its ``pytest_configure``; this hook runs before it and fills
``--timeout`` when neither the option, ``PYTEST_TIMEOUT`` nor the ini set one, so every test gets
pytest-timeout's own timer, method and report, as with plain pytest-timeout. Under ``harness run
--timeouts-from-history`` (``HARNESS_TEST_TIMEOUTS``) each test the history recorded gets its own
timeout from its seconds instead, as pytest-timeout's ``timeout`` marker, unless the test has one or the
user set a timeout.

Each try of a test runs under its own timeout: pytest-timeout arms a test's timer once, around its whole
protocol, and cancels it when a try fails (its ``pytest_exception_interact``), so a retry (the harness's
or pytest-rerunfailures') would run with none. A try's set-up after the first re-arms it through
pytest-timeout's own hooks, with the settings pytest-timeout armed it with.

pytest-timeout's thread method ends the process (``os._exit``): the harness arms that timer itself,
through pytest-timeout's ``pytest_timeout_set_timer`` hook, with a timer that writes the test's
``timeout`` finding into the ledger before calling pytest-timeout's own ``timeout_timer``, so the test
its process died in is known to have timed out (the ledger's reader classes it ``timeout``).
"""

from __future__ import annotations

import os
import threading

import pytest
from pytest_timeout import Settings, get_env_settings, is_debugging, timeout_timer

from harness.config.variables import TEST_TIMEOUTS
from harness.errors import HarnessError
from harness.pytest_plugin.session import process_context
from harness.tracking.context import current

_EFFECTIVE = pytest.StashKey[Settings]()
_FILLED = pytest.StashKey[bool]()  # the timeout in force is the harness's default, not the user's
# the settings pytest-timeout armed a test's protocol-wide timer with, and whether a try has used it yet
_ARMED = pytest.StashKey[tuple[Settings, bool]]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    default_timeout(config, process_context(config).settings.test_timeout_s)


def default_timeout(config: pytest.Config, seconds: float) -> None:
    """The platform's per-test timeout when the user set none (``--timeout``, ``PYTEST_TIMEOUT``, ini)."""
    if not config.pluginmanager.hasplugin("timeout"):
        return
    try:
        settings = get_env_settings(config)
    except ValueError:  # a malformed value: pytest-timeout's own configure reports it
        return
    config.stash[_FILLED] = settings.timeout is None
    if settings.timeout is None:
        config.option.timeout = seconds
        settings = settings._replace(timeout=seconds)
    config.stash[_EFFECTIVE] = settings


def worker_fields(config: pytest.Config) -> dict:
    """The per-test timeout in force and its method, for the ledger's ``worker`` event: a worker that
    pytest-timeout's thread method ended can then be told apart."""
    settings = config.stash.get(_EFFECTIVE, None)
    return {} if settings is None else {"timeout": settings.timeout, "timeout_method": settings.method}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each recorded test's timeout from ``HARNESS_TEST_TIMEOUTS`` (read by the one loader of read-back
    files), where neither the test nor the user set one."""
    path = os.environ.get(TEST_TIMEOUTS)
    if not path or not config.stash.get(_FILLED, False):
        return
    from harness.report.store import recorded  # noqa: PLC0415 -- its schema loads only here

    try:
        seconds, _, _ = recorded(path)
    except HarnessError as error:
        raise pytest.UsageError(f"{TEST_TIMEOUTS}={path}: {error}") from None
    for item in items:
        if item.nodeid in seconds and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(seconds[item.nodeid]))


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Settings) -> bool | None:
    """pytest-timeout arms ``item``'s timer: noted, unused yet. The signal method's arming is left to it
    (None); the thread method's is armed here, to say in the ledger that it fired (True)."""
    if not settings.func_only:  # a func_only timer is armed by each call already
        item.stash[_ARMED] = (settings, False)
    if settings.method != "thread" or current().writer is None:
        return None
    timer = threading.Timer(settings.timeout, _fired, (item, settings))
    timer.name = f"pytest_timeout {item.nodeid}"

    def cancel() -> None:
        timer.cancel()
        timer.join()

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # what pytest-timeout's cancel calls
    timer.start()
    return True


def _fired(item: pytest.Item, settings: Settings) -> None:
    """The thread method's timeout: the ledger's ``timeout`` finding, then pytest-timeout's own action
    (stacks dumped, the process ended), unless it will not act (a debugger)."""
    writer = current().writer
    if writer is not None and (settings.disable_debugger_detection or not is_debugging()):
        message = f"Timeout (>{settings.timeout}s) from pytest-timeout's thread method: the process ends"
        writer.write("finding", type="timeout", test=item.nodeid, message=message)
    timeout_timer(item, settings)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A try's set-up: the first uses the timer pytest-timeout armed; each later one re-arms it."""
    armed = item.stash.get(_ARMED, None)
    if armed is None:
        return
    settings, used = armed
    if used:
        item.ihook.pytest_timeout_cancel_timer(item=item)
        item.ihook.pytest_timeout_set_timer(item=item, settings=settings)
    item.stash[_ARMED] = (settings, True)
