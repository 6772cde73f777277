"""The session's process context and its place in xdist: controller, worker or a single process.

The context (platform, settings) is built once per session from pytest's rootdir; an xdist worker is
handed the controller's platform name, so it detects the same platform. The context it replaced comes
back at unconfigure (a pytest run inside a test).
"""

from __future__ import annotations

import os

import pytest

from harness.config.pyproject import find_pyproject
from harness.errors import HarnessError
from harness.tracking import context
from harness.tracking.context import Context

PLATFORM = "harness_platform"  # workerinput key: the controller's platform name
_CONTEXT = pytest.StashKey[Context]()
_REPLACED = pytest.StashKey[Context | None]()


def process_context(config: pytest.Config) -> Context:
    """This session's process context: its platform detected here, once; a bad ``[tool.harness]`` or
    device mask is the session's usage error."""
    if _CONTEXT not in config.stash:
        env = dict(os.environ)
        workerinput = getattr(config, "workerinput", {})
        if PLATFORM in workerinput:
            env["HARNESS_PLATFORM"] = workerinput[PLATFORM]
        try:
            built = context.build(find_pyproject(config.rootpath), env)
        except HarnessError as error:
            raise pytest.UsageError(str(error)) from None
        config.stash[_REPLACED] = context.use(built)
        config.stash[_CONTEXT] = built
    return config.stash[_CONTEXT]


def recording(config: pytest.Config) -> bool:
    """Whether this session writes a ledger (its context has a writer), without building the context."""
    return _CONTEXT in config.stash and config.stash[_CONTEXT].writer is not None


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _CONTEXT in config.stash:
        context.use(config.stash[_REPLACED])


def is_controller(config: pytest.Config) -> bool:
    """The xdist controller: it runs no tests, its workers do (``-n``, or ``--tx`` with ``--dist``)."""
    return not hasattr(config, "workerinput") and worker_count(config) > 0


def worker_count(config: pytest.Config) -> int:
    """How many workers xdist will start (0 without distribution); ``-n auto`` is resolved by now."""
    if getattr(config.option, "dist", "no") == "no" or not getattr(config.option, "tx", None):
        return 0
    from xdist.workermanage import parse_tx_spec_config

    return len(parse_tx_spec_config(config))


def worker_id(config: pytest.Config) -> str:
    """``gw0``... in an xdist worker, ``main`` elsewhere.

    From the session, not from ``PYTEST_XDIST_WORKER``: a pytest started from inside a worker inherits
    that variable without being a worker.
    """
    return config.workerinput["workerid"] if hasattr(config, "workerinput") else "main"
