"""The platform's per-test timeout, through pytest-timeout's own option, where the user set none.

pytest-timeout reads its settings in its ``pytest_configure``; this hook runs before it and fills
``--timeout`` when neither the option, ``PYTEST_TIMEOUT`` nor the ini set one, so every test gets
pytest-timeout's own timer, method and report, as with plain pytest-timeout.
"""

from __future__ import annotations

import pytest
from pytest_timeout import Settings, get_env_settings

from harness.pytest_plugin.session import process_context

_EFFECTIVE = pytest.StashKey[Settings]()


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
    if settings.timeout is None:
        config.option.timeout = seconds
        settings = settings._replace(timeout=seconds)
    config.stash[_EFFECTIVE] = settings


def worker_fields(config: pytest.Config) -> dict:
    """The per-test timeout in force and its method, for the ledger's ``worker`` event: a worker that
    pytest-timeout's thread method ended can then be told apart."""
    settings = config.stash.get(_EFFECTIVE, None)
    return {} if settings is None else {"timeout": settings.timeout, "timeout_method": settings.method}
