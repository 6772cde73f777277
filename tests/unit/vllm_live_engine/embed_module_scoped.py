"""vLLM PR #52570's shape: a module-scoped engine still alive when a later test builds its own."""

import pytest
from shared import OWN, SHARED, embed, engine


@pytest.fixture(scope="module")
def embedder():
    llm = engine(SHARED)
    yield llm
    llm.llm_engine.engine_core.shutdown()


def test_shared_embedding(embedder):
    assert len(embed(embedder)) == 384


def test_own_engine():
    llm = engine(OWN)
    assert len(embed(llm)) == 384
    llm.llm_engine.engine_core.shutdown()


@pytest.mark.timeout(120)
def test_engine_dies_under_the_test(embedder):
    """The engine process killed between two calls (an OOM killer, a driver fault): once vLLM's monitor
    has seen it, vLLM raises EngineDeadError, and the harness classes the failure engine-died."""
    import time

    core = embedder.llm_engine.engine_core
    core.resources.engine_manager.processes[0].kill()
    deadline = time.monotonic() + 60
    while not core.resources.engine_dead and time.monotonic() < deadline:
        time.sleep(0.1)
    embed(embedder)
