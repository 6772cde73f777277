"""The ``gpus(n)`` marker: a test that needs n GPUs is skipped where fewer are visible, and run serially
on its first n devices only. vLLM's ``distributed(num_gpus=n)`` counts as ``gpus(n)``."""

from __future__ import annotations

import os

import pytest

from harness.platform.slots import mask_variables, slots
from harness.pytest_plugin.session import process_context

_NARROWED = pytest.StashKey[dict]()
_INVALID = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpus(n): the test needs n GPUs; it runs in the multi-GPU phase")


def _visible_gpus(config: pytest.Config) -> int:
    platform = process_context(config).platform
    return 0 if platform.mask_variable is None else len(platform.devices())


def _carrying(items: list[pytest.Item], names: frozenset[str]) -> list[pytest.Item]:
    """The items with a marker of one of ``names`` on themselves or a parent node, each parent looked at
    once: ``get_closest_marker`` on every item walks every parent every time, a cost on thousands of tests
    when none of them is marked. Only parents are remembered: each item is looked at once anyway."""
    seen: dict[int, bool] = {}

    def own(node) -> bool:
        return any(m.name in names for m in node.own_markers)

    def marked(node) -> bool:
        if node is None:
            return False
        if id(node) not in seen:
            seen[id(node)] = own(node) or marked(node.parent)
        return seen[id(node)]

    return [item for item in items if own(item) or marked(item.parent)]


def _distributed_as_gpus(items: list[pytest.Item]) -> None:
    """vLLM's ``distributed(num_gpus=n)`` counts as ``gpus(n)`` (vLLM's ``multi_gpu_marks`` set it)."""
    for item in items:
        marker = item.get_closest_marker("distributed")
        if marker is not None and item.get_closest_marker("gpus") is None and "num_gpus" in marker.kwargs:
            item.add_marker(pytest.mark.gpus(marker.kwargs["num_gpus"]))


def _needed(item: pytest.Item) -> int | None:
    marker = item.get_closest_marker("gpus")
    if marker is None:
        return None
    count = marker.args[0] if len(marker.args) == 1 and not marker.kwargs else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise pytest.UsageError(f"{item.nodeid}: the gpus marker takes one positive integer, as in gpus(2)")
    return count


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpus(n)`` tests this process cannot serve, saying how many GPUs they need and see.

    First, before ``-m`` deselects, so the multi-GPU phase (``-m gpus``) takes vLLM's tests as marked.
    """
    marked = _carrying(items, frozenset(("gpus", "distributed")))
    _distributed_as_gpus(marked)
    needing = []
    for item in marked:
        try:
            count = _needed(item)
        except pytest.UsageError as error:
            if not hasattr(config, "workerinput"):
                raise
            # an xdist worker cannot end the session with a usage error (xdist reports an INTERNALERROR)
            item.stash[_INVALID] = str(error)
            if not config.pluginmanager.has_plugin("harness-invalid"):
                config.pluginmanager.register(_Invalid(), "harness-invalid")
            continue
        if count is not None:
            needing.append((item, count))
    if not needing:
        return
    visible = _visible_gpus(config)
    serial = not hasattr(config, "workerinput")
    narrowed = False
    for item, count in needing:
        if count > visible:
            item.add_marker(pytest.mark.skip(reason=f"needs {count} GPUs, {visible} visible"))
        elif serial and count < visible:
            platform = process_context(config).platform
            mask = ",".join(slot.mask for slot in slots(platform)[:count])
            item.stash[_NARROWED] = mask_variables(platform, mask)
            narrowed = True
    if narrowed and not config.pluginmanager.has_plugin("harness-narrowing"):
        config.pluginmanager.register(_Narrowing(), "harness-narrowing")


class _Invalid:
    """Under xdist, a test with a malformed ``gpus`` marker fails with the message a serial run stops on.

    Registered only when such a test was collected, so other runs pay nothing per test.
    """

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        message = item.stash.get(_INVALID, None)
        if message is not None:
            pytest.fail(message, pytrace=False)


class _Narrowing:
    """A ``gpus(n)`` test run serially sees its first n devices only (engines it spawns inherit that).

    Registered only when such a test was collected, so other runs pay nothing per test.
    """

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        narrowed = item.stash.get(_NARROWED, None)
        if narrowed is None:
            return (yield)
        saved = {name: os.environ.get(name) for name in narrowed}
        os.environ.update(narrowed)
        try:
            return (yield)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
