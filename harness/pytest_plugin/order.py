"""Configuration-aware order: tests that started one engine configuration last time run one after another.

``harness run --durations-from REPORT`` (or ``HARNESS_DURATIONS_FROM``) writes, per test, the fingerprint
of the first vLLM configuration the test itself started or was handed by the reuse pool, and points
``HARNESS_CONFIGURATIONS`` at that file. Each worker then orders its collected tests the same way, so
xdist sees one collection: within a run of sibling tests (one module or class, one value of every fixture
parameter that is not the test's own ``parametrize``), tests are gathered behind the first test of their
configuration. Tests never leave their module, class or fixture parameter, so no fixture of a wider scope
is set up twice; with ``loadscope``/``loadfile`` a module stays on one worker, and so does each group.
Without the variable and with reuse on (a first run: no history yet), the configuration that is evident
before a test runs stands in: its own ``parametrize`` values (the arguments a naive test passes to
``vllm_runner(...)``), so within the same bounds tests of the same values run one after another.
Otherwise the order is pytest's own.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Hashable
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
    return _gathered(items, lambda item: configuration.get(item.nodeid))


def by_parameters(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with each run of siblings gathered by the values of their own ``parametrize``."""
    return _gathered(items, _own_values)


def _gathered(items: list[pytest.Item], key: Callable[[pytest.Item], Hashable | None]) -> list[pytest.Item]:
    ordered: list[pytest.Item] = []
    for _, siblings in groupby(items, key=_context):
        groups: dict[object, list[pytest.Item]] = {}
        for item in siblings:
            found = key(item)
            groups.setdefault(item if found is None else found, []).append(item)
        ordered += [item for group in groups.values() for item in group]
    return ordered


def _own_values(item: pytest.Item) -> tuple | None:
    """The test's own ``parametrize`` values by name, as text every xdist worker writes alike (no memory
    addresses); None for a test without any."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    own = _own(item)
    values = tuple((name, _text(value)) for name, value in sorted(callspec.params.items()) if name in own)
    return values or None


def _text(value: object) -> str:
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


def _context(item: pytest.Item) -> tuple:
    """What a test may not be moved across: its parent node and its wider-scoped fixture parameters."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return (item.parent.nodeid if item.parent else "",)
    own = _own(item)
    shared = sorted((name, repr(value)) for name, value in callspec.params.items() if name not in own)
    return (item.parent.nodeid if item.parent else "", *shared)


def _own(item: pytest.Item) -> set[str]:
    return {name.strip() for mark in item.iter_markers("parametrize") for name in _argnames(mark)}


def _argnames(mark: pytest.Mark) -> list[str]:
    names = mark.args[0] if mark.args else mark.kwargs.get("argnames", ())
    return names.split(",") if isinstance(names, str) else list(names)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Registered by the entry point when ``HARNESS_CONFIGURATIONS`` names a file, and by the recorder when
    reuse is on; after pytest's own grouping of fixture parameters."""
    path = os.environ.get(CONFIGURATIONS)
    items[:] = by_configuration(items, load(path)) if path else by_parameters(items)
