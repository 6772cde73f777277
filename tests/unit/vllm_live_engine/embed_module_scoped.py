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
