"""The reuse pools' view of the session: which test opted out (``fresh_engine``), and the session's end
(warm engines shut down, kept HF models dropped). Registered by the recorder only when reuse is asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from harness.tracking.reuse import Pool


class Reuse:
    def __init__(self, pool: Pool):
        self.pool = pool

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """Before the test's fixtures: they may build runners too."""
        if item.get_closest_marker("fresh_engine") is not None:
            self.pool.fresh_test(item.nodeid)
        else:
            self.pool.fresh = False

    def pytest_sessionfinish(self) -> None:
        """Warm engines are shut down (and their stops recorded) while the ledger is still open."""
        self.pool.close()


class ClearShelf:
    """Kept HF models go at the session's end, their stops recorded before the summary reads them."""

    def __init__(self, shelf) -> None:
        self.shelf = shelf

    def pytest_sessionfinish(self) -> None:
        self.shelf.clear()
