"""The background memory sampler: ``memory`` events in the ledger, and their points on the timeline."""

from __future__ import annotations

import os
import threading
import xml.etree.ElementTree as ET

from harness import platform as platforms
from harness.ledger import reader
from harness.ledger.writer import LedgerWriter
from harness.report.finalize import finalize
from harness.tracking.sampler import MemorySampler
from tests.fakes import gpu
from tests.unit.report_runs import GIB, run_suite

pytest_plugins = ["pytester"]
SVG = "{http://www.w3.org/2000/svg}"

SUITE = """
import json, os, time
from pathlib import Path
from tests import fakes
from tests.unit.runner_suites.fake_runner import FakeRunner

def _samples():
    files = Path("run", "ledger").rglob("*.jsonl")
    lines = [line for path in files for line in path.read_text().splitlines()]
    return sum(json.loads(line)["event"] == "memory" for line in lines if line.endswith("}"))

def _four_more_samples():  # the sampler's next four; off, the time it would have had
    if os.environ["HARNESS_MEMORY_SAMPLE_S"] == "0":
        time.sleep(0.8)
        return
    wanted = _samples() + 4
    while _samples() < wanted:
        time.sleep(0.05)

def test_engine_and_a_tensor_outside_any_runner():
    with FakeRunner("e5", gpu_memory_utilization=0.25):
        _four_more_samples()
    path = Path(os.environ["FAKE_GPUS_FILE"])
    gpus = json.loads(path.read_text())
    gpus[0]["used"] += 30 * 2**30  # memory no runner event reads: only the sampler sees it
    fakes.write(path, gpus)  # in one step: the sampler's thread reads the file meanwhile
    _four_more_samples()  # the first may have read the file before the write; the rest read it after
"""


def test_samples_reach_the_ledger_report_and_timeline(pytester, monkeypatch, fake_gpus):
    fake_gpus([gpu(0, total=80 * GIB, used=GIB)])
    monkeypatch.setenv("HARNESS_MEMORY_SAMPLE_S", "0.1")  # the shortest interval the settings take
    result, run_dir = run_suite(pytester, monkeypatch, {"test_sampled": SUITE})
    result.assert_outcomes(passed=1)
    report = finalize(run_dir, env=dict(os.environ), publish=False)
    used = [sample["used"][gpu(0)["uuid"]] for sample in report["samples"]]
    assert len(used) >= 8
    assert max(used) == 31 * GIB  # the write outside runners (the first sample is one interval in)
    assert [s["t"] for s in report["samples"]] == sorted(s["t"] for s in report["samples"])
    [memory] = [
        g for g in ET.parse(run_dir / "timeline.svg").getroot().iter(f"{SVG}g") if g.get("class") == "memory"
    ]
    points = memory.find(f"{SVG}polyline").get("points").split()
    assert len(points) >= 2 * len(used) - 1  # every sample is a step on the line, besides the runner's
    assert [t.text for t in memory.iter(f"{SVG}text")] == ["mem 31.0 / 80 GiB"]


def test_zero_turns_the_sampler_off(pytester, monkeypatch, fake_gpus):
    fake_gpus([gpu(0, total=80 * GIB, used=GIB)])
    monkeypatch.setenv("HARNESS_MEMORY_SAMPLE_S", "0")
    result, run_dir = run_suite(pytester, monkeypatch, {"test_sampled": SUITE})
    result.assert_outcomes(passed=1)
    assert finalize(run_dir, env=dict(os.environ), publish=False)["samples"] == []


def test_a_session_shorter_than_an_interval_reads_no_memory(fake_gpus, tmp_path, monkeypatch):
    """The first sample is one interval in: a session that ends before it (most that start no runner)
    never asks the management library for memory."""
    fake_gpus([gpu(0)])
    platform = platforms.detect({**os.environ, "HARNESS_PLATFORM": "cuda"}).platform
    reads = []
    monkeypatch.setattr(platform, "memory", lambda: reads.append(1) or {})
    writer = LedgerWriter(tmp_path / "ledger", "main")
    MemorySampler(writer, platform, 60).start().stop()
    assert reads == []
    assert [e["event"] for e in reader.events(writer.path)] == []


def test_an_unexpected_error_of_the_library_stops_sampling_with_a_finding(fake_gpus, tmp_path, monkeypatch):
    """Not only the errors the platform wraps: whatever a management library raises ends the sampling with
    one finding naming it, not a thread's traceback in the middle of the user's run."""
    fake_gpus([gpu(0)])
    platform = platforms.detect({**os.environ, "HARNESS_PLATFORM": "cuda"}).platform
    monkeypatch.setattr(platform, "memory", lambda: {}[0])  # a KeyError, as a library's own bug raises it
    died = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    writer = LedgerWriter(tmp_path / "ledger", "main")
    sampler = MemorySampler(writer, platform, 0.01).start()
    sampler._thread.join(5)
    assert not sampler._thread.is_alive() and died == []
    sampler.stop()
    [finding] = [e for e in reader.events(writer.path) if e["event"] == "finding"]
    assert (finding["type"], finding["message"]) == ("sampler-stopped", "KeyError: 0")
