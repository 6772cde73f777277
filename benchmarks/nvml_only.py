"""A pytest plugin for benchmarks/session_phases.py: the harness's NVML work and nothing else of it, in a
plain pytest session (``'plain-nvml=plain HARNESS_PLATFORM=cuda -p nvml_only'``). The platform is found as
the harness finds it (``detect_later`` at configure, its devices by the end of collection) and its memory
read once, as the sampler's first reading does: the cuda platform's cost over plain then splits into
NVML's own and the rest of the harness's."""

from __future__ import annotations

import pytest

from harness.platform import detect_later

_FOUND = pytest.StashKey[object]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_FOUND] = detect_later()


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[_FOUND].ready().memory()
