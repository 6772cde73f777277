"""timeline.svg and report.html: a bar per ledger record, lanes, phases, memory, overlaps marked."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from harness.report.finalize import finalize
from harness.report.timeline import overlaps
from tests.fakes import gpu
from tests.unit.report_runs import GIB, T0, Run, overlap_run, run_suite

pytest_plugins = ["pytester"]
SVG = "{http://www.w3.org/2000/svg}"


def _bars(root: ET.Element) -> dict[str, ET.Element]:
    return {g.get("id"): g for g in root.iter(f"{SVG}g") if g.get("data-runner")}


def test_one_bar_per_record_with_overlaps_marked(tmp_path):
    report = overlap_run(tmp_path).finalize()
    root = ET.parse(tmp_path / "timeline.svg").getroot()
    bars = _bars(root)
    assert sorted(bars) == [
        "runner-default-gw0-1",
        "runner-default-gw0-2",
        "runner-default-gw1-1",
        "runner-multi-gw0-1",
    ]
    assert len(bars) == len(report["records"])
    overlapping = {key for key, g in bars.items() if "overlap" in g.get("class").split()}
    assert overlapping == {"runner-default-gw0-1", "runner-default-gw0-2"}
    assert bars["runner-default-gw0-2"].get("data-test") == "tests/p/test_a.py::test_three"
    assert bars["runner-multi-gw0-1"].get("class") == "runner vllm never-stopped"
    [label] = [t.text for t in bars["runner-default-gw0-1"].iter(f"{SVG}text")]
    assert label == "e5-small · llm"
    [band] = [g for g in root.iter(f"{SVG}g") if g.get("class") == "overlap-band"]
    assert band.get("data-runners") == "gw0-1 gw0-2"


def test_lanes_phases_and_memory_lines(tmp_path):
    overlap_run(tmp_path).finalize()
    root = ET.parse(tmp_path / "timeline.svg").getroot()
    lanes = [
        (g.get("data-worker"), g.get("data-device")) for g in root.iter(f"{SVG}g") if g.get("class") == "lane"
    ]
    assert lanes == [("gw0", "GPU-0"), ("gw1", "GPU-1")]
    assert [g.get("data-phase") for g in root.iter(f"{SVG}g") if g.get("class") == "phase"] == [
        "default",
        "multi",
    ]
    memory = {g.get("data-device"): g for g in root.iter(f"{SVG}g") if g.get("class") == "memory"}
    assert sorted(memory) == ["GPU-0", "GPU-1"]
    # GPU-0: 3 samples per stopped runner (2 of them) and 2 for the never-stopped one; a step line doubles
    points = memory["GPU-0"].find(f"{SVG}polyline").get("points").split()
    assert len(points) == 2 * 8 - 1
    assert [t.text for t in memory["GPU-0"].iter(f"{SVG}text")] == ["mem 120.0 GiB peak"]


def test_overlaps_need_a_shared_device_and_a_shared_moment():
    def record(runner, start, stop, devices, outcome="started", startup=1.0):
        return {
            "id": runner,
            "start": start,
            "stop": stop,
            "devices": devices,
            "outcome": outcome,
            "startup_s": startup,
        }

    a = record("a", 0, 10, ["GPU-0"])
    b = record("b", 5, 15, ["GPU-1"])
    c = record("c", 10, 20, ["GPU-0"])
    d = record("d", 12, None, ["GPU-1", "GPU-0"], outcome="blocked", startup=2.0)
    e = record("e", 30, None, ["GPU-0"], outcome="never-stopped")
    assert [(x["id"], y["id"], s, t) for x, y, s, t in overlaps([a, b, c, d, e], end=40)] == [
        ("b", "d", 12, 14.0),
        ("c", "d", 12, 14.0),
    ]
    assert [(x["id"], y["id"]) for x, y, _, _ in overlaps([c, e], end=40)] == []
    assert [(x["id"], y["id"]) for x, y, _, _ in overlaps([a, e], end=40)] == []
    assert [(x["id"], y["id"]) for x, y, _, _ in overlaps([record("f", 25, 35, ["GPU-0"]), e], end=40)] == [
        ("f", "e")
    ]


def test_report_html_shows_the_svg_and_the_summary(tmp_path):
    overlap_run(tmp_path).finalize()
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<title>harness: pooling on cpu</title>" in page
    assert page.count("<svg") == 1 and 'data-runner="gw0-2"' in page
    assert "<h2>Phases</h2>" in page and "<td>default</td>" in page
    assert "<strong>live-runner-overlap</strong>" in page


def test_a_real_run_has_one_bar_per_ledger_record(pytester, monkeypatch, fake_gpus):
    """The #52570 shape through the real plugin: a module-scoped engine alive when a later test builds one."""
    fake_gpus([gpu(0, total=80 * GIB, used=GIB)])
    suite = """
from tests.unit.runner_suites.fake_runner import FakeRunner

@pytest.fixture(scope="module")
def llm():
    with FakeRunner("e5", gpu_memory_utilization=0.6) as runner:
        yield runner

def test_shared(llm):
    pass

def test_small_own_engine():
    with FakeRunner("bge", gpu_memory_utilization=0.2):
        pass

def test_big_own_engine():
    with FakeRunner("e5-large", gpu_memory_utilization=0.6):
        pass
"""
    result, run_dir = run_suite(pytester, monkeypatch, {"test_leaky": suite})
    result.assert_outcomes(passed=2, failed=1)
    report = finalize(run_dir, env=dict(os.environ), publish=False)
    bars = _bars(ET.parse(run_dir / "timeline.svg").getroot())
    records = {f"runner-default-{r['id']}": r for r in report["records"]}
    assert sorted(bars) == sorted(records) and len(records) == 3
    outcome = {
        records[k]["model"]: (records[k]["outcome"], "overlap" in g.get("class")) for k, g in bars.items()
    }
    assert outcome == {"e5": ("started", True), "bge": ("started", True), "e5-large": ("blocked", True)}
    assert report["devices"] == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": gpu(0)["uuid"], "total_bytes": 80 * GIB}
    ]
    assert all(r["start"] > T0 for r in report["records"])


def test_a_runner_never_stopped_does_not_overlap_the_next_phase(tmp_path):
    """Its worker died with the phase; a later phase's runner on the same GPU is not 'two alive'."""
    run = Run(tmp_path).phase("shared-engine", 0.0, 100.0, exit_code=1).phase("standalone", 105.0, 50.0)
    run.worker("shared-engine", "gw0", ("GPU-0",)).runner("tests/t.py::test_crashes", 10, 20, None)
    run.worker("standalone", "gw0", ("GPU-0",)).runner("tests/t.py::test_own", 110, 20, 140)
    run.finalize()
    bars = _bars(ET.parse(tmp_path / "timeline.svg").getroot())
    assert len(bars) == 2
    assert not [key for key, g in bars.items() if "overlap" in g.get("class").split()]
