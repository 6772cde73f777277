"""The footprint recorder itself (``harness.select.profiler``): both implementations keep the same promise,
each owner gets the files whose code ran while it recorded, whatever ran for an earlier owner. The
``sys.monitoring`` one (Python 3.12+) runs here only on 3.12+; 3.11 has only ``cProfile``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.select import profiler

NEW = sys.version_info >= (3, 12)
KINDS = [
    profiler.Profile,
    pytest.param(
        getattr(profiler, "Monitor", None),
        marks=pytest.mark.skipif(not NEW, reason="sys.monitoring is Python 3.12+"),
        id="Monitor",
    ),
]


def module(root: Path, name: str) -> ModuleType:
    (root / f"{name}.py").write_text("def run():\n    return 1\n")
    spec = importlib.util.spec_from_file_location(f"_recorder_{name}", root / f"{name}.py")
    assert spec and spec.loader
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


@pytest.fixture
def modules(tmp_path) -> tuple[profiler.Paths, ModuleType, ModuleType]:
    return profiler.Paths({str(tmp_path): ""}), module(tmp_path, "a"), module(tmp_path, "b")


@pytest.mark.parametrize("kind", KINDS)
def test_each_owner_gets_what_ran_for_it_even_if_an_earlier_owner_ran_it(kind, modules):
    """Old code of Monitor without restart_events(): the second owner would miss a.py (disabled)."""
    paths, a, b = modules
    recorder = kind(paths)
    recorder.switch("first")
    for _ in range(3):
        a.run()
    recorder.switch("second")
    a.run()
    b.run()
    recorder.switch(None)
    a.run()  # nobody records
    assert recorder.take("first") == {"a.py"}
    assert recorder.take("second") == {"a.py", "b.py"}
    assert recorder.take("first") == set()  # taken once


@pytest.mark.parametrize("kind", KINDS)
def test_switch_returns_the_previous_owner_and_a_nested_owner_hands_back(kind, modules):
    paths, a, b = modules
    recorder = kind(paths)
    assert recorder.switch("test") is None
    previous = recorder.switch("fixture")
    b.run()
    assert recorder.switch(previous) == "fixture"
    a.run()
    recorder.switch(None)
    assert recorder.files == {"fixture": {"b.py"}, "test": {"a.py"}}


def test_this_python_gets_the_recorder_its_version_has(modules):
    chosen = profiler.recorder(modules[0])
    assert type(chosen).__name__ == ("Monitor" if NEW else "Profile")


@pytest.mark.skipif(not NEW, reason="sys.monitoring is Python 3.12+")
def test_monitor_holds_a_tool_id_only_while_recording_and_yields_to_others(modules):
    """A tool another program holds is left alone; with both ids taken nothing records, nothing breaks."""
    paths, a, _ = modules
    monitoring = sys.monitoring
    recorder = profiler.Monitor(paths)
    recorder.switch("one")
    assert monitoring.get_tool(3) == "harness footprints"
    recorder.switch(None)
    assert monitoring.get_tool(3) is None
    monitoring.use_tool_id(3, "someone else")
    try:
        recorder.switch("two")
        a.run()
        assert monitoring.get_tool(4) == "harness footprints"
        recorder.switch(None)
        monitoring.use_tool_id(4, "someone else too")
        try:
            recorder.switch("three")
            a.run()
            recorder.switch(None)
        finally:
            monitoring.free_tool_id(4)
    finally:
        monitoring.free_tool_id(3)
    assert recorder.take("two") == {"a.py"}
    assert recorder.take("three") == set()
    assert not recorder.complete  # the plugin then writes no footprints: too few files would skip tests


@pytest.mark.parametrize("kind", KINDS)
def test_a_recorder_that_recorded_every_owner_says_it_is_complete(kind, modules):
    recorder = kind(modules[0])
    recorder.switch("one")
    modules[1].run()
    recorder.switch(None)
    assert recorder.complete
