"""Runner fixtures (``vllm_runner``, ``hf_runner``) and fixture attribution: runners built while a fixture
is set up are that fixture's, and a fixture that grew memory holds it until it is finalized."""

from __future__ import annotations

import pytest

from harness.pytest_plugin.session import process_context, recording


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """Attribute runners built during a fixture's setup to it, and hold fixtures that grew memory."""
    if not recording(request.config):
        return (yield)
    from harness.tracking import starts  # at the first fixture, not in a session that sets up none

    with starts.fixture_setup(("fixture", id(fixturedef)), fixturedef.argname, fixturedef.scope):
        return (yield)


def pytest_fixture_post_finalizer(fixturedef, request) -> None:
    if recording(request.config):
        process_context(request.config).release(("fixture", id(fixturedef)))


@pytest.fixture(scope="session")
def vllm_runner():
    """The ``VllmRunner`` class, session-scoped as in vLLM's conftest, so class- and module-scoped engine
    fixtures can build from it."""
    from harness.runners import VllmRunner  # where a test asks for it: a session that builds none skips it

    return VllmRunner


@pytest.fixture(scope="session")
def hf_runner():
    """The ``HfRunner`` class, session-scoped as in vLLM's conftest."""
    from harness.runners import HfRunner

    return HfRunner
