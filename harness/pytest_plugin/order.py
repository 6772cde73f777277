"""Configuration-aware order: tests that started one engine configuration last time run one after another.

``harness run --durations-from REPORT`` (or ``HARNESS_DURATIONS_FROM``) writes, per test, the fingerprint
of the first vLLM configuration the test itself started or was handed by the reuse pool, and points
``HARNESS_CONFIGURATIONS`` at that file. Each worker then orders its collected tests the same way, so
xdist sees one collection: within a run of sibling tests (one module or class, one value of every fixture
parameter that is not the test's own ``parametrize``), tests are gathered behind the first test of their
configuration. Tests never leave their module, class or fixture parameter, so no fixture of a wider scope
is set up twice; with ``loadscope``/``loadfile`` a module stays on one worker, and so does each group.
Without the variable the order is pytest's own.
"""

from __future__ import annotations

import json
import os
from itertools import groupby
from pathlib import Path

import pytest

from harness.pytest_plugin import CONFIGURATIONS


def load(path: str) -> dict[str, str]:
    """``{node id: fingerprint}`` from the file ``harness run`` wrote; a bad file is a one-line error."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise pytest.UsageError(f"{CONFIGURATIONS}={path}: cannot read it ({error})") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise pytest.UsageError(f"{CONFIGURATIONS}={path}: expected a JSON object of node id -> fingerprint")
    return data


def by_configuration(items: list[pytest.Item], configuration: dict[str, str]) -> list[pytest.Item]:
    """``items`` with each run of siblings gathered by configuration (first appearance first)."""
    ordered: list[pytest.Item] = []
    for _, siblings in groupby(items, key=_context):
        groups: dict[object, list[pytest.Item]] = {}
        for item in siblings:
            key = configuration.get(item.nodeid)
            groups.setdefault(item if key is None else key, []).append(item)
        ordered += [item for group in groups.values() for item in group]
    return ordered


def _context(item: pytest.Item) -> tuple:
    """What a test may not be moved across: its parent node and its wider-scoped fixture parameters."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return (item.parent.nodeid if item.parent else "",)
    own = {name.strip() for mark in item.iter_markers("parametrize") for name in _argnames(mark)}
    shared = sorted((name, repr(value)) for name, value in callspec.params.items() if name not in own)
    return (item.parent.nodeid if item.parent else "", *shared)


def _argnames(mark: pytest.Mark) -> list[str]:
    names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
    return names.split(",") if isinstance(names, str) else list(names)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Registered by the entry point when ``HARNESS_CONFIGURATIONS`` names a file; after pytest's own
    grouping of fixture parameters."""
    path = os.environ.get(CONFIGURATIONS)
    if path:
        items[:] = by_configuration(items, load(path))
