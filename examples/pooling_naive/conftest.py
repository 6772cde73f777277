"""The naive pooling example reuses the shipped suite's setup: offline hub, markers, model list."""

from tests.models.conftest import pytest_collection_modifyitems, pytest_configure  # noqa: F401
from tests.models.pooling.conftest import pooling_model  # noqa: F401
