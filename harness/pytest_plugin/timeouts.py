"""Per-platform test timeouts through pytest-timeout, where the user set none."""

from __future__ import annotations

import os

import pytest


def default_timeout(config: pytest.Config, seconds: float) -> None:
    """The platform's per-test timeout when the user set none (``--timeout``, ini, ``PYTEST_TIMEOUT``)."""
    if not config.pluginmanager.hasplugin("timeout"):
        return
    if (
        config.getoption("timeout") is not None
        or os.environ.get("PYTEST_TIMEOUT")
        or config.getini("timeout")
    ):
        return
    config.option.timeout = seconds
