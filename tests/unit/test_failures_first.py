"""Failures first (harness.pytest_plugin.order.arranged): tests that failed in the history run before the
rest, each with its configuration group and its run of siblings, for any history; every test once."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.config.variables import FAILED
from harness.pytest_plugin.order import _configuration, arranged, failed

pytest_plugins = ["pytester"]


class Item:
    """A test as ``arranged`` sees it: a distinct object per collected test, duplicated names allowed."""

    def __init__(self, nodeid: str):
        self.nodeid = nodeid

    def __repr__(self) -> str:
        return self.nodeid


FILES = st.sampled_from(["a.py", "b.py", "c.py"])
NAMES = st.sampled_from(["t1", "t2", "t3", "t4", "t5"])
NODEIDS = st.builds(lambda f, n: f"{f}::{n}", FILES, NAMES)
VALUES = st.one_of(
    st.none(), st.sampled_from(["A", "B", FAILED, f"{FAILED} A", f"{FAILED} B", "reuse-sensitive"])
)


def _context(item: Item) -> str:
    return item.nodeid.split("::")[0]


@settings(max_examples=400, deadline=None)
@given(
    nodeids=st.lists(NODEIDS, max_size=30),
    history=st.dictionaries(st.one_of(NODEIDS, st.text(max_size=8)), VALUES, max_size=20),
)
def test_failed_tests_come_first_with_their_groups_and_siblings_whole(nodeids, history):
    """For any history (empty, of unknown node ids, duplicated tests, bare and marked failures): every test
    exactly once; each run of siblings and each configuration group within it stays contiguous; a test that
    failed precedes every run holding no failure; without failures the order is the one given."""
    items = [Item(nodeid) for nodeid in nodeids]

    def value(item: Item) -> str | None:
        return history.get(item.nodeid)

    ordered = arranged(
        items, _context, lambda item: _configuration(value(item)), lambda item: failed(value(item))
    )
    assert sorted(map(id, ordered)) == sorted(map(id, items))
    # the runs of siblings as given are each whole and in their own order of groups
    runs: list[list[Item]] = []
    for item in items:
        if runs and _context(runs[-1][0]) == _context(item):
            runs[-1].append(item)
        else:
            runs.append([item])
    position = {id(item): index for index, item in enumerate(ordered)}
    for run in runs:
        places = sorted(position[id(item)] for item in run)
        assert places == list(range(places[0], places[0] + len(places)))  # whole
        groups: dict[object, list[int]] = {}
        for item in run:
            groups.setdefault(_configuration(value(item)) or id(item), []).append(position[id(item)])
        for found in groups.values():
            assert sorted(found) == list(range(min(found), min(found) + len(found)))  # a group whole
        hit = [position[id(i)] for i in run if failed(value(i))]
        plain = [
            min(found)
            for key, found in groups.items()
            if not any(failed(value(i)) for i in run if (_configuration(value(i)) or id(i)) == key)
        ]
        assert max(hit, default=-1) < min(plain, default=len(items))  # in a run, failed groups first
    with_failure = [run for run in runs if any(failed(value(item)) for item in run)]
    without = [run for run in runs if run not in with_failure]
    last_failed = max((position[id(i)] for run in with_failure for i in run if failed(value(i))), default=-1)
    first_clean = min((position[id(i)] for run in without for i in run), default=len(items))
    assert last_failed < first_clean
    if not with_failure:
        assert [_context(i) for i in ordered] == [
            _context(i) for run in runs for i in run
        ]  # the runs in the order given
        assert [id(i) for i in ordered if not _configuration(value(i))] == [
            id(i) for i in items if not _configuration(value(i))
        ]


def test_a_failed_test_moves_first_with_its_configuration_and_module(pytester, monkeypatch):
    """A real session: the failing test's module runs first, its configuration group first in it, and
    the plugin says how many."""
    pytester.makepyfile(
        test_a="def test_1(): pass\ndef test_2(): pass\n",
        test_b="def test_1(): pass\ndef test_2(): pass\ndef test_3(): pass\ndef test_4(): pass\n",
    )
    history = {"test_b.py::test_1": "A", "test_b.py::test_3": f"{FAILED} B", "test_b.py::test_4": "B"}
    path = pytester.path / "configurations.json"
    path.write_text(json.dumps(history))
    monkeypatch.setenv("HARNESS_CONFIGURATIONS", str(path))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--harness", "-v")
    ran = [line.split(" ")[0] for line in result.outlines if " PASSED" in line]
    assert ran == [
        "test_b.py::test_3", "test_b.py::test_4", "test_b.py::test_1", "test_b.py::test_2",
        "test_a.py::test_1", "test_a.py::test_2",
    ]  # fmt: skip
    result.stdout.fnmatch_lines(
        ["*harness: failures first: 1 tests that failed last time, 4 with their siblings"]
    )


@pytest.mark.parametrize(
    ("value", "configuration", "is_failed"),
    [(None, None, False), ("A", "A", False), (FAILED, None, True), (f"{FAILED} A", "A", True)],
)
def test_the_failed_mark(value, configuration, is_failed):
    """A bare ``failed`` (the test started no engine) groups with nothing; a marked one keeps its group."""
    assert _configuration(value) == configuration
    assert failed(value) is is_failed
