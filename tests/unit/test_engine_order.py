"""The order tests/conftest.py gives xdist's worksteal: the tests that boot vLLM processes (``engines(n)``)
open the workers' chunks, the most booting first, each on the worker with the fewest boots so far; a test
that reads its module's run (``engines`` without a count) follows that run's test."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests import conftest


def _item(name: str, module: str, boots: int | None):
    marker = None if boots is None else SimpleNamespace(args=(boots,) if boots else ())
    return SimpleNamespace(name=name, module=module, get_closest_marker=lambda _, m=marker: m)


def _chunks(items: list, workers: int) -> list[list]:
    """The contiguous chunks worksteal hands the workers (``n // W``, then the rest's share)."""
    chunks, left, start = [], len(items), 0
    for worker in range(workers):
        size = left // (workers - worker)
        left -= size
        chunks.append(items[start : start + size])
        start += size
    return chunks


def test_the_longest_go_to_different_workers_and_a_reader_follows_its_run(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    slow = [
        _item("safety", "safety", 13),
        _item("threads", "safety", 0),
        _item("clean", "vllm", 9),
        _item("own", "vllm", 9),
        _item("spawned", "spawned", 8),
        _item("budget", "budget", 3),
        _item("live", "live", 7),
    ]
    items = [*slow, *[_item(f"quick{i}", "quick", None) for i in range(40)]]
    conftest.pytest_collection_modifyitems(items)
    firsts = [[i.name for i in chunk if not i.name.startswith("quick")] for chunk in _chunks(items, 4)]
    # before: safety and spawned (13 + 8) on one worker, budget alone beside threads
    assert firsts == [["safety", "threads"], ["clean", "budget"], ["own"], ["spawned", "live"]]


@given(
    boots=st.lists(st.integers(0, 20), max_size=12),
    quick=st.integers(0, 60),
    workers=st.integers(2, 8),
)
@example(boots=[1, 1, 1, 1], quick=1, workers=3)  # a worker's two engines overflow its chunk of one
@example(boots=[0, 0, 0, 0, 1], quick=1, workers=2)  # the quick tests run out before a chunk is full
def test_every_test_kept_once_and_each_chunk_opens_with_its_engines(boots, quick, workers):
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
        slow = [_item(f"slow{i}", f"m{i % 3}", n) for i, n in enumerate(boots)]
        items = [*slow, *[_item(f"quick{i}", "quick", None) for i in range(quick)]]
        before = [i.name for i in items]
        conftest.pytest_collection_modifyitems(items)
        assert sorted(i.name for i in items) == sorted(before)
        for chunk in _chunks(items, workers):
            names = [i.name for i in chunk]
            engines = [n for n in names if n.startswith("slow")]
            if len(engines) < len(chunk):  # a chunk wider than its engines: they come first
                assert names[: len(engines)] == engines


def test_alone_the_order_is_pytests(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    items = [_item("quick", "q", None), _item("slow", "s", 5)]
    conftest.pytest_collection_modifyitems(items)
    assert [i.name for i in items] == ["quick", "slow"]
