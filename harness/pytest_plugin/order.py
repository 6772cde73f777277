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

Failures first: a test the history marks ``failed`` runs before the rest with its whole engine group
(``harness.split.Groups.block``: its package's where a package-scoped fixture started a runner there,
handed over as ``HARNESS_ENGINE_GROUPS``, else its file: a module-scoped engine and every class of the
module), never split, within it its file, its run of siblings and its configuration group first, so a
fixture of a wider scope still sets up once; the
first failing signal comes in seconds instead of at the end (PyTorch's ordering by previous failures:
pytorch #101123). Every shard's session orders its own tests so. In a file it does not move, each class's
and module's first test stays first, so learned timeouts (``harness.report.previous.History.timeouts``)
know which tests may pay a wider fixture's start (in a moved file, any may).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from itertools import groupby
from typing import TypeVar

import pytest

from harness import split
from harness.config.variables import ENGINE_GROUPS
from harness.errors import HarnessError
from harness.pytest_plugin import CONFIGURATIONS
from harness.report.marks import decode

T = TypeVar("T")


def load(path: str) -> dict[str, str]:
    """``{node id: fingerprint}`` from the file ``harness run`` wrote, through the one loader of read-back
    files (``harness.report.store``); a bad file is a one-line usage error."""
    from harness.report.store import configurations  # noqa: PLC0415 -- its schema loads only here

    try:
        return configurations(path)
    except HarnessError as error:
        raise pytest.UsageError(f"{CONFIGURATIONS}={path}: {error}") from None


def groups() -> split.Groups:
    """The history's engine groups ``harness run`` handed over (``HARNESS_ENGINE_GROUPS``, through the one
    loader), else none beyond files; a bad file is a one-line usage error."""
    path = os.environ.get(ENGINE_GROUPS)
    if not path:
        return split.Groups()
    from harness.report.store import engine_groups  # noqa: PLC0415 -- its schema loads only here

    try:
        return split.Groups.of_packages(engine_groups(path)["packages"])
    except HarnessError as error:
        raise pytest.UsageError(f"{ENGINE_GROUPS}={path}: {error}") from None


def by_configuration(
    items: list[pytest.Item], configuration: dict[str, str], engines: split.Groups | None = None
) -> list[pytest.Item]:
    """``items`` with each run of siblings gathered by configuration (first appearance first), the engine
    groups (``engines``' blocks), files, runs and groups holding a test that failed in the history first
    (``arranged``)."""
    engines = engines or split.Groups()
    return arranged(
        items,
        _context,
        lambda item: _configuration(configuration.get(item.nodeid)),
        lambda item: failed(configuration.get(item.nodeid)),
        [lambda item: engines.block(item.nodeid), _file],
    )


def _file(item: pytest.Item) -> str:
    """A test's file: a module-scoped fixture's scope, inside its engine group."""
    return item.nodeid.split("::", 1)[0]


def _configuration(value: str | None) -> str | None:
    """A history's value without its ``failed`` mark: a test that failed still runs with its configuration
    (one that started none has none: it is not gathered with other failed tests)."""
    return decode(value).configuration


def failed(value: str | None) -> bool:
    """Whether a history's value marks a test that failed in that run."""
    return decode(value).failed


def arranged(
    items: Sequence[T],
    context: Callable[[T], Hashable],
    key: Callable[[T], Hashable | None],
    first: Callable[[T], bool],
    blocks: Sequence[Callable[[T], Hashable]] = (),
) -> list[T]:
    """``items`` as runs of siblings (consecutive items of one ``context``), each gathered by ``key``
    (first appearance first; None: a group of its own), the runs as nested blocks (``blocks``, widest
    first: consecutive runs of one engine group, within it of one file; none: each run its own); at each
    level the blocks holding a ``first`` item before the rest, within the last the runs holding one first,
    within a run the groups holding one first; otherwise the order given. Every item exactly once, every
    group, run of siblings and block whole (checked: a bug here is exit 4)."""
    runs: list[list[T]] = []
    for _, siblings in groupby(items, key=context):
        groups: dict[object, list[T]] = {}
        for index, item in enumerate(siblings):
            found = key(item)
            groups.setdefault(("alone", index) if found is None else ("key", found), []).append(item)
        runs.append([item for group in _first(groups.values(), first) for item in group])
    ordered = [item for run in _nested(runs, blocks, first) for item in run]
    if sorted(map(id, ordered)) != sorted(map(id, items)):
        raise RuntimeError("the order lost or doubled a test")  # a bug of ours: exit 4
    return ordered


def _nested(
    runs: list[list[T]], blocks: Sequence[Callable[[T], Hashable]], first: Callable[[T], bool]
) -> list[list[T]]:
    """``runs`` cut into consecutive blocks of ``blocks[0]``, those holding a ``first`` item first, each
    block's runs ordered so by the next level; past the last level, the runs holding one first."""
    if not blocks:
        return _first(runs, first)
    parts = [list(together) for _, together in groupby(runs, key=lambda run: blocks[0](run[0]))]
    return [
        run
        for part in _first(parts, lambda run: any(map(first, run)))
        for run in _nested(part, blocks[1:], first)
    ]


def _first(parts: Iterable[list[T]], first: Callable[[T], bool]) -> list[list[T]]:
    """``parts`` holding a ``first`` item before the others, each side in the order given."""
    parts = list(parts)
    return [part for part in parts if any(map(first, part))] + [
        part for part in parts if not any(map(first, part))
    ]


def by_parameters(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` with each run of siblings gathered by the values of their own ``parametrize``."""
    return _gathered(items, _own_values)


def _gathered(items: list[pytest.Item], key: Callable[[pytest.Item], Hashable | None]) -> list[pytest.Item]:
    return arranged(items, _context, key, lambda _: False)


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
    if not path:
        items[:] = by_parameters(items)
        return
    history, engines = load(path), groups()
    items[:] = by_configuration(items, history, engines)
    again = sum(failed(history.get(item.nodeid)) for item in items)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if again and reporter is not None:
        ahead = sum(len(run) for run in _runs(items, history, engines))
        reporter.write_line(
            f"harness: failures first: {again} tests that failed last time, {ahead} with their siblings"
        )


def _runs(
    items: list[pytest.Item], history: dict[str, str], engines: split.Groups
) -> list[list[pytest.Item]]:
    """The engine groups (``engines``' blocks) holding a test that failed in the history (after
    ``by_configuration``, the first ones)."""
    runs = [list(run) for _, run in groupby(items, key=lambda item: engines.block(item.nodeid))]
    return [run for run in runs if any(failed(history.get(item.nodeid)) for item in run)]
