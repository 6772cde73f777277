"""The platform's per-test timeout, through pytest-timeout's own option, where the user set none.

pytest-timeout reads its settings in its ``pytest_configure``; this hook runs before it and fills
``--timeout`` when neither the option, ``PYTEST_TIMEOUT`` nor the ini set one, so every test gets
pytest-timeout's own timer, method and report, as with plain pytest-timeout. Under ``harness run
--timeouts-from-history`` (``HARNESS_TEST_TIMEOUTS``) each test the history recorded gets its own
timeout from its seconds instead, as pytest-timeout's ``timeout`` marker, unless the test has one or the
user set a timeout.
"""

from __future__ import annotations

import os

import pytest
from pytest_timeout import Settings, get_env_settings

from harness.config.variables import TEST_TIMEOUTS
from harness.errors import HarnessError
from harness.pytest_plugin.session import process_context

_EFFECTIVE = pytest.StashKey[Settings]()
_FILLED = pytest.StashKey[bool]()  # the timeout in force is the harness's default, not the user's


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
