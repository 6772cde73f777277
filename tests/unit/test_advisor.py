"""The reuse advisor: which starts one shared fixture could have served, at which scope, saving what."""

from __future__ import annotations

import os

from harness.report.advisor import class_of
from harness.report.finalize import finalize
from tests.fakes import gpu
from tests.unit.report_runs import GIB, Run, run_suite

pytest_plugins = ["pytester"]

FAKE = "from tests.unit.runner_suites.fake_runner import FakeRunner\n"


def _advice(tmp_path, starts):
    """Advice for starts given as (worker, test, start, startup_s, model, fingerprint)."""
    run = Run(tmp_path).phase("default", 0, 500)
    workers = {}
    for worker, test, start, startup, model, fingerprint in starts:
        log = workers.setdefault(worker, run.worker("default", worker))
        log.runner(test, start, startup, start + startup + 1, model=model, fingerprint=fingerprint)
    return run.finalize()["advice"]


def test_three_module_level_tests_starting_one_engine_get_module_scope(tmp_path):
    advice = _advice(
        tmp_path,
        [
            ("gw0", "tests/t.py::test_a", 0, 30, "e5", "f1"),
            ("gw0", "tests/t.py::test_b", 40, 25, "e5", "f1"),
            ("gw0", "tests/t.py::test_c[x]", 70, 20, "e5", "f1"),
        ],
    )
    assert len(advice) == 1
    item = advice[0]
    assert item["tests"] == ["tests/t.py::test_a", "tests/t.py::test_b", "tests/t.py::test_c[x]"]
    assert (item["scope"], item["class"], item["starts"], item["seconds_saved"]) == ("module", None, 3, 45.0)
    assert (item["model"], item["file"], item["worker"], item["phase"]) == (
        "e5",
        "tests/t.py",
        "gw0",
        "default",
    )
    assert item["warning"] is None


def test_tests_of_one_class_get_class_scope(tmp_path):
    advice = _advice(
        tmp_path,
        [
            ("gw0", "tests/t.py::TestE5::test_a", 0, 30, "e5", "f1"),
            ("gw0", "tests/t.py::TestE5::test_b", 40, 30, "e5", "f1"),
        ],
    )
    assert [(a["scope"], a["class"], a["seconds_saved"]) for a in advice] == [
        ("class", "tests/t.py::TestE5", 30.0)
    ]


def test_other_worker_file_model_or_configuration_is_not_mergeable(tmp_path):
    advice = _advice(
        tmp_path,
        [
            ("gw0", "tests/t.py::test_a", 0, 30, "e5", "f1"),
            ("gw1", "tests/t.py::test_b", 0, 30, "e5", "f1"),
            ("gw0", "tests/u.py::test_c", 40, 30, "e5", "f1"),
            ("gw0", "tests/t.py::test_d", 80, 30, "e5", "f2"),
            ("gw0", "tests/t.py::test_e", 120, 30, "bge", "f1"),
        ],
    )
    assert advice == []


def test_a_later_standalone_runner_in_the_module_is_warned_about(tmp_path):
    advice = _advice(
        tmp_path,
        [
            ("gw0", "tests/t.py::test_a", 0, 30, "e5", "f1"),
            ("gw0", "tests/t.py::test_b", 40, 30, "e5", "f1"),
            ("gw0", "tests/t.py::test_own", 80, 30, "bge", "f9"),
        ],
    )
    assert advice[0]["blocked"] == [{"test": "tests/t.py::test_own", "kind": "vllm", "model": "bge"}]
    assert advice[0]["warning"].startswith(
        "a module-scoped vllm runner of e5 would still hold the device when tests/t.py::test_own (vllm bge) "
        "starts its own runner (the vLLM #52570 trap)"
    )


def test_class_scope_does_not_warn_about_runners_after_the_class(tmp_path):
    advice = _advice(
        tmp_path,
        [
            ("gw0", "tests/t.py::TestE5::test_a", 0, 30, "e5", "f1"),
            ("gw0", "tests/t.py::TestE5::test_b", 40, 30, "e5", "f1"),
            ("gw0", "tests/t.py::test_own", 80, 30, "bge", "f9"),
        ],
    )
    assert (advice[0]["scope"], advice[0]["warning"]) == ("class", None)


def test_biggest_saving_first(tmp_path):
    advice = _advice(
        tmp_path,
        [
            ("gw0", "tests/t.py::test_a", 0, 5, "small", "f1"),
            ("gw0", "tests/t.py::test_b", 10, 5, "small", "f1"),
            ("gw0", "tests/t.py::test_c", 20, 30, "big", "f2"),
            ("gw0", "tests/t.py::test_d", 60, 30, "big", "f2"),
        ],
    )
    assert [(a["model"], a["seconds_saved"]) for a in advice] == [("big", 30.0), ("small", 5.0)]


def test_class_of_node_ids():
    assert class_of("tests/t.py::TestA::test_x[a::b]") == "tests/t.py::TestA"
    assert class_of("tests/t.py::test_x[a::b]") is None
    assert class_of(None) is None


def test_pytester_suite_of_three_tests_each_starting_the_engine(pytester, monkeypatch, fake_gpus):
    fake_gpus([gpu(0, total=80 * GIB, used=GIB)])
    suite = (
        FAKE
        + """
def test_first():
    with FakeRunner("e5", gpu_memory_utilization=0.3):
        pass

def test_second():
    with FakeRunner("e5", gpu_memory_utilization=0.3):
        pass

def test_third():
    with FakeRunner("e5", gpu_memory_utilization=0.3):
        pass

def test_other_model_later():
    with FakeRunner("bge", gpu_memory_utilization=0.3):
        pass
"""
    )
    result, run_dir = run_suite(pytester, monkeypatch, {"test_embed": suite})
    result.assert_outcomes(passed=4)
    report = finalize(run_dir, env=dict(os.environ), publish=False)
    [item] = report["advice"]
    assert item["tests"] == [
        "test_embed.py::test_first",
        "test_embed.py::test_second",
        "test_embed.py::test_third",
    ]
    assert (item["scope"], item["starts"], item["model"]) == ("module", 3, "e5")
    starts = [r["startup_s"] for r in report["records"] if r["model"] == "e5"]
    assert item["seconds_saved"] == round(sum(starts[1:]), 3)
    assert "test_embed.py::test_other_model_later (vllm bge)" in item["warning"]
    summary = (run_dir / "summary.md").read_text()
    assert "`test_embed.py::test_first`, `test_embed.py::test_second`, `test_embed.py::test_third`" in summary
    assert "one module-scoped fixture for module `test_embed.py`" in summary
    assert "#52570 trap" in summary
