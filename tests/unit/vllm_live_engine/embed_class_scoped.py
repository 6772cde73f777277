"""The fix of vLLM PR #52570's regression: the shared engine lives in a class, so it is gone before
the test that builds its own."""

import pytest
from shared import OWN, SHARED, embed, engine


class TestShared:
    @pytest.fixture(scope="class")
    @classmethod
    def embedder(cls):
        llm = engine(SHARED)
        yield llm
        llm.llm_engine.engine_core.shutdown()

    def test_shared_embedding(self, embedder):
        assert len(embed(embedder)) == 384

    def test_shared_again(self, embedder):
        assert len(embed(embedder)) == 384


def test_own_engine():
    llm = engine(OWN)
    assert len(embed(llm)) == 384
    llm.llm_engine.engine_core.shutdown()
