"""junit.xml: pytest's per-phase files merged, runner starts as properties on the test that owned them."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from harness.report.finalize import finalize
from harness.report.junit import START_PROPERTY, case_key, merge
from tests.fakes import gpu
from tests.unit.report_runs import GIB, Run, overlap_run, run_suite

pytest_plugins = ["pytester"]

SUITE = """
from tests.unit.runner_suites.fake_runner import FakeRunner

@pytest.fixture(scope="class")
def engine():
    with FakeRunner("e5", gpu_memory_utilization=0.3) as runner:
        yield runner

class TestShared:
    def test_one(self, engine):
        pass

    def test_two(self, engine):
        pass

@pytest.mark.parametrize("size", ["a::b", "c"])
def test_own(size):
    with FakeRunner("bge", gpu_memory_utilization=0.2):
        assert size != "c"
"""


def _properties(root: ET.Element) -> dict[tuple[str, str], list[str]]:
    return {
        (case.get("classname"), case.get("name")): [
            p.get("value") for p in case.iter("property") if p.get("name") == START_PROPERTY
        ]
        for case in root.iter("testcase")
    }


def test_a_real_run_gets_its_starts_on_the_owning_testcases(pytester, monkeypatch, fake_gpus):
    fake_gpus([gpu(0, total=80 * GIB, used=GIB)])
    result, run_dir = run_suite(pytester, monkeypatch, {"test_embed": SUITE})
    result.assert_outcomes(passed=3, failed=1)
    finalize(run_dir, env=dict(os.environ), publish=False)
    root = ET.parse(run_dir / "junit.xml").getroot()
    assert [s.get("name") for s in root.iter("testsuite")] == ["default"]
    single = ET.parse(run_dir / "junit" / "default.xml").getroot()
    assert [c.attrib for c in root.iter("testcase")] == [c.attrib for c in single.iter("testcase")]
    properties = _properties(root)
    assert list(properties) == [
        ("test_embed.TestShared", "test_one"),
        ("test_embed.TestShared", "test_two"),
        ("test_embed", "test_own[a::b]"),
        ("test_embed", "test_own[c]"),
    ]
    [shared] = properties[("test_embed.TestShared", "test_one")]
    assert (
        shared.startswith("vllm e5 [")
        and "started startup" in shared
        and "by fixture engine (class)" in shared
    )
    assert properties[("test_embed.TestShared", "test_two")] == []
    assert len(properties[("test_embed", "test_own[a::b]")]) == 1
    assert "by test body" in properties[("test_embed", "test_own[c]")][0]
    failure = next(c for c in root.iter("testcase") if c.get("name") == "test_own[c]")
    assert failure.find("failure") is not None


def test_case_key_follows_pytest_junitxml():
    assert case_key("tests/m/test_x.py::TestA::test_b[1-2]") == ("tests.m.test_x.TestA", "test_b[1-2]")
    assert case_key("test_x.py::test_b") == ("test_x", "test_b")


def test_an_unreadable_phase_file_becomes_a_suite_that_says_why(tmp_path):
    run = overlap_run(tmp_path)
    junit = tmp_path / "junit"
    junit.mkdir()
    (junit / "default.xml").write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="1">'
        '<testcase classname="tests.p.test_a" name="test_one" time="31"/></testsuite></testsuites>'
    )
    (junit / "multi.xml").write_text('<testsuites><testsuite name="pytest"><testcase classname="x" na')
    report = run.finalize()
    root = ET.fromstring(merge(junit, report["records"]))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert list(suites) == ["default", "multi"]
    assert _properties(suites["default"])[("tests.p.test_a", "test_one")][0].startswith(
        "vllm intfloat/e5-small"
    )
    [error] = suites["multi"].iter("property")
    assert error.get("name") == "harness.error" and error.get("value").startswith("multi.xml unreadable:")


def test_no_junit_directory_gives_an_empty_merge(tmp_path):
    root = ET.fromstring(merge(tmp_path / "junit", []))
    assert (root.tag, list(root)) == ("testsuites", [])


CONTROL = "\x1b[31mred\x1b[0m line\nbreak\ttab\x00nul\x0bvt\x7fdel"


def test_junit_xml_stays_valid_with_control_characters_in_a_test_id_and_message(tmp_path):
    """An ANSI escape, a newline, NUL and other control characters in a test id, a crash message and a
    model name: junit.xml parses with xml.etree, and says where they were as pytest's junitxml would."""
    run = Run(tmp_path).phase("default", 0, 10)
    worker = run.worker("default")
    nodeid = f"tests/t.py::test_x[{CONTROL}]"
    worker.runner(nodeid, 1, 3, 5, model=f"model{CONTROL}")
    worker.test(nodeid, "failed", t=6)
    worker.write("test-start", 7, nodeid=f"tests/t.py::test_y[{CONTROL}]")
    worker.write("crash", 8, test=f"tests/t.py::test_y[{CONTROL}]", how=f"killed {CONTROL}")
    run.finalize()
    root = ET.parse(tmp_path / "junit.xml").getroot()
    names = [case.get("name") for case in root.iter("testcase")]
    assert len(names) == 2 and all("#x1B[31mred" in name for name in names)
    assert all("\x1b" not in name and "\x00" not in name for name in names)
    texts = [e.text or "" for e in root.iter()] + [v for e in root.iter() for v in e.attrib.values()]
    assert any("killed #x1B[31mred" in text for text in texts)
