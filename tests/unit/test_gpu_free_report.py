"""GPU-free tests wired end to end: each test event says whether its process held device memory of its own
(``device_bytes``, torch's allocator peak, absent without a device context), and report.json and summary.md
name the tests that held a GPU without using it, with their GPU-minutes."""

from __future__ import annotations

import json

import pytest

from harness import ledger
from harness.ledger.check import FIELDS
from harness.report import union
from harness.report.store import load
from harness.report.summary import render
from tests.fakes.torch_cuda import GIB
from tests.unit.report_runs import Run

pytest_plugins = ["pytester"]


# Run in a process of their own: swapping ``sys.modules["torch"]`` in a worker that has imported the real
# torch can make a later ``import torch`` there run torch's __init__ over its loaded C extension again.
PEAK_TESTS = """
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.platform import allocator
from tests.fakes.torch_cuda import GIB, FakeCuda, module


def test_no_device_context_no_bytes(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert allocator.peak_reserved() is None
    cuda = FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", module(cuda))
    assert allocator.peak_reserved() is None  # torch imported, CUDA never initialised


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8 * GIB), st.booleans()), max_size=12))
def test_the_peak_is_each_tests_own(steps):
    # each call returns the most torch reserved since the previous one, never less than it holds now
    cuda = FakeCuda()
    sys.modules["torch"] = module(cuda)
    try:
        cuda.alloc(GIB)
        allocator.peak_reserved()
        for size, freed in steps:
            before = cuda.memory_reserved()
            cuda.alloc(size)
            most = cuda.memory_reserved()
            if freed:
                cuda.free(size)
            peak = allocator.peak_reserved()
            assert peak is not None and peak >= most >= before
            assert peak == max(before, most)
    finally:
        del sys.modules["torch"]
"""


def test_the_allocator_peak_is_each_tests_own(pytester, fake_gpus):
    """No device context: None; with one, each call the most torch reserved since the last (a property,
    200 examples), in a process of its own."""
    fake_gpus([])  # and the checkout on PYTHONPATH, for tests.fakes
    pytester.makepyfile(test_peak=PEAK_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--no-harness")
    result.assert_outcomes(passed=2)


DEVICE_TESTS = """
import sys
import types


class Cuda:
    peak = 0
    def is_initialized(self): return True
    def device_count(self): return 1
    def max_memory_reserved(self, index=0): return self.peak
    def reset_peak_memory_stats(self, index=0): pass


def test_plain():
    pass


def test_tensor():
    torch = types.ModuleType("torch")
    torch.cuda = Cuda()
    torch.cuda.peak = 3 * 2**30
    sys.modules["torch"] = torch


def test_after_it():
    sys.modules["torch"].cuda.peak = 0
"""


def test_the_test_event_carries_device_bytes(pytester, monkeypatch):
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    pytester.makepyfile(test_x=DEVICE_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--harness", "--harness-ledger-dir", "led"
    )
    assert result.ret == 0
    events = [json.loads(line) for line in (pytester.path / "led" / "main.jsonl").read_text().splitlines()]
    tests = {e["nodeid"].rpartition("::")[2]: e for e in events if e["event"] == "test"}
    assert "device_bytes" not in tests["test_plain"]  # no torch: nothing, not a 0
    assert tests["test_tensor"]["device_bytes"] == 3 * GIB
    assert tests["test_after_it"]["device_bytes"] == 0  # a context, but no memory
    read = {t["nodeid"].rpartition("::")[2]: t for t in ledger.read(pytester.path / "led").tests}
    assert read["test_tensor"]["device_bytes"] == 3 * GIB and not ledger.read(pytester.path / "led").findings


@pytest.mark.parametrize("value", [-1, 1.5, "3", True])
def test_a_bad_device_bytes_is_a_finding(value):
    check, required, nullable = FIELDS["test"]["device_bytes"]
    assert not check(value) and not required and not nullable


def _gpu_run(root, platform="cuda"):
    run = Run(root, platform=platform).phase("default", 0, 100)
    worker = run.worker("default", "gw0", ("GPU-0", "GPU-1"))
    worker.runner("t.py::test_engine", 1, 5, 20)
    worker.test("t.py::test_engine", t=20, call_s=19)
    worker.test("t.py::test_`tok`|<b>", t=80, call_s=60)  # 60 s on 2 devices: 2 GPU-minutes
    worker.test("t.py::test_skip", outcome="skipped", t=81, call_s=1)
    worker.write(
        "test", 90, nodeid="t.py::test_tensor", outcome="passed", setup_s=0, call_s=9, teardown_s=0,
        device_bytes=GIB,
    )  # fmt: skip
    return run


def test_report_and_summary_name_the_gpu_free_tests(tmp_path):
    report = _gpu_run(tmp_path).finalize()
    assert report["gpu_free"] == {
        "tests": [{"nodeid": "t.py::test_`tok`|<b>", "seconds": 60.0, "devices": 2, "gpu_minutes": 2.0}],
        "gpu_minutes": 2.0,
    }
    assert load(tmp_path)["gpu_free"] == report["gpu_free"]  # through the one loader
    line = next(line for line in render(report).splitlines() if "GPU-free" in line)
    assert line.startswith("1 GPU-free tests held GPUs for 2.00 GPU-minutes")
    assert "`t.py::test_'tok'\\|<b>` (2.00)" in line  # escaped as the rest of summary.md


def test_off_a_gpu_nothing_is_named(tmp_path):
    report = _gpu_run(tmp_path, "cpu").finalize()
    assert report["gpu_free"] == {"tests": [], "gpu_minutes": 0}
    assert "GPU-free" not in render(report)


def test_a_report_without_it_still_loads(tmp_path):
    report = _gpu_run(tmp_path).finalize()
    del report["gpu_free"]
    (tmp_path / "old.json").write_text(json.dumps(report))
    assert "gpu_free" not in load(tmp_path / "old.json")
    assert "GPU-free" not in render(load(tmp_path / "old.json"))


def test_shards_are_judged_each_in_its_own_job(tmp_path):
    """A runner in shard 0's gw0 says nothing of shard 1's gw0 (another machine)."""
    a, b = _gpu_run(tmp_path / "a").finalize(), _gpu_run(tmp_path / "b").finalize()
    joined = union.gpu_free.joined([a["gpu_free"], b["gpu_free"]])
    assert [t["nodeid"] for t in joined["tests"]] == ["t.py::test_`tok`|<b>"] * 2
    assert joined["gpu_minutes"] == 4.0
