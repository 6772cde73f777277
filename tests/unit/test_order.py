"""Configuration-aware order (harness.pytest_plugin.order): tests that started one configuration last time
run one after another, never across their module, class or wider fixture parameters; pytest's own order
without a history; the history from a recorded run (harness.report.previous.History.configurations)."""

from __future__ import annotations

import json

import pytest

from harness.errors import ReportError
from harness.report.previous import read
from tests.unit.report_runs import Run

pytest_plugins = ["pytester"]

SUITE = """
import pytest

@pytest.fixture(scope="session", params=["m1", "m2"])
def model(request):
    return request.param

def test_a(model): pass
def test_b(model): pass
def test_c(model): pass

@pytest.mark.parametrize("n", [1, 2])
def test_d(model, n): pass

class TestK:
    def test_x(self): pass
    def test_y(self): pass
    def test_z(self): pass

def test_e(): pass
"""


def _order(
    pytester, monkeypatch, configurations: dict | None, *options: str, suite: str = SUITE
) -> list[str]:
    pytester.makepyfile(test_s=suite)
    if configurations is not None:
        path = pytester.path / "configurations.json"
        path.write_text(json.dumps({f"test_s.py::{k}": v for k, v in configurations.items()}))
        monkeypatch.setenv("HARNESS_CONFIGURATIONS", str(path))
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider", *options)
    return [line.removeprefix("test_s.py::") for line in result.outlines if line.startswith("test_s.py::")]


# a naive file: every test starts its own engine of the configuration its parameters name
NAIVE = """
import pytest

class Engine:
    def __init__(self, length):
        self.length = length
    def __repr__(self):
        return f"<Engine {self.length} at 0x{id(self):x}>"

CONFIGS = [Engine(64), Engine(128)]

@pytest.mark.parametrize("config", CONFIGS)
def test_embed(config): pass

@pytest.mark.parametrize("config", CONFIGS)
def test_score(config): pass

def test_plain(): pass

@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("n", [1, 2])
def test_both(config, n): pass

class TestK:
    @pytest.mark.parametrize("config", CONFIGS)
    def test_x(self, config): pass
    @pytest.mark.parametrize("config", CONFIGS)
    def test_y(self, config): pass
"""


def test_a_first_run_with_reuse_gathers_tests_of_the_same_parameters(pytester, monkeypatch):
    """No history: with reuse on, the configuration evident before a test runs (its own parametrize
    values) gathers it behind the first test of those values, never out of its module or class."""
    monkeypatch.delenv("HARNESS_CONFIGURATIONS", raising=False)
    assert _order(pytester, monkeypatch, None, "--harness-reuse", suite=NAIVE) == [
        "test_embed[config0]", "test_score[config0]",
        "test_embed[config1]", "test_score[config1]",
        "test_plain", "test_both[1-config0]", "test_both[1-config1]", "test_both[2-config0]",
        "test_both[2-config1]",
        "TestK::test_x[config0]", "TestK::test_y[config0]",
        "TestK::test_x[config1]", "TestK::test_y[config1]",
    ]  # fmt: skip
    # without reuse nothing is gained by moving tests: pytest's own order
    assert _order(pytester, monkeypatch, None, suite=NAIVE)[:4] == [
        "test_embed[config0]", "test_embed[config1]", "test_score[config0]", "test_score[config1]",
    ]  # fmt: skip


def test_without_history_the_order_is_pytests(pytester, monkeypatch):
    assert _order(pytester, monkeypatch, None) == [
        "test_a[m1]", "test_b[m1]", "test_c[m1]", "test_d[m1-1]", "test_d[m1-2]",
        "test_a[m2]", "test_b[m2]", "test_c[m2]", "test_d[m2-1]", "test_d[m2-2]",
        "TestK::test_x", "TestK::test_y", "TestK::test_z", "test_e",
    ]  # fmt: skip


def test_tests_of_one_configuration_are_gathered_within_their_module_class_and_parameters(
    pytester, monkeypatch
):
    history = {
        "test_a[m1]": "A", "test_b[m1]": "B", "test_c[m1]": "A", "test_d[m1-1]": "B", "test_d[m1-2]": "A",
        "test_a[m2]": "C", "test_b[m2]": "D", "test_c[m2]": "C",
        "TestK::test_x": "A", "TestK::test_y": "B", "TestK::test_z": "A", "test_e": "A",
    }  # fmt: skip
    assert _order(pytester, monkeypatch, history) == [
        "test_a[m1]", "test_c[m1]", "test_d[m1-2]", "test_b[m1]", "test_d[m1-1]",
        "test_a[m2]", "test_c[m2]", "test_b[m2]", "test_d[m2-1]", "test_d[m2-2]",
        "TestK::test_x", "TestK::test_z", "TestK::test_y", "test_e",
    ]  # fmt: skip


def test_an_unreadable_history_file_is_one_line(pytester, monkeypatch):
    pytester.makepyfile(test_s="def test_a(): pass\n")
    monkeypatch.setenv("HARNESS_CONFIGURATIONS", str(pytester.path / "missing.json"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: HARNESS_CONFIGURATIONS=*missing.json: *no such configurations file"])


def test_the_history_is_each_tests_first_own_vllm_configuration(tmp_path):
    run = Run(tmp_path).phase("default", 0, 100)
    worker = run.worker("default")
    worker.runner("t.py::test_one", 0, 30, 31, fingerprint="A")
    worker.runner("t.py::test_one", 40, 30, 71, fingerprint="B")  # its second: not the one it is filed by
    worker.runner("t.py::test_two", 80, 30, 111, fingerprint="C", fixture="engine", scope="module")
    worker.runner("t.py::test_three", 120, 5, 126, fingerprint="H", kind="hf")
    first = worker.runner("t.py::test_four", 130, 30, fingerprint="B")
    worker.reused(first, "t.py::test_five", 170, fingerprint="B", saved_s=30)
    run.finalize()
    # the module-scoped fixture's start cannot move with its test; HF loads are not engine configurations
    expected = {"t.py::test_one": "A", "t.py::test_four": "B", "t.py::test_five": "B"}
    assert read(tmp_path).configurations == expected
    assert read(tmp_path / "report.json").configurations == expected


def test_a_test_that_failed_in_the_history_is_marked_and_keeps_its_configuration(tmp_path):
    """The reuse safety net does not run again a test the history saw fail (its failure is its own: no
    extra start); ordering still groups it by its configuration."""
    run = Run(tmp_path).phase("default", 0, 100)
    worker = run.worker("default")
    worker.runner("t.py::test_one", 0, 30, 31, fingerprint="A")
    worker.test("t.py::test_one", "failed", t=32)
    worker.test("t.py::test_two", "error", t=33)
    run.finalize()
    history = read(tmp_path).configurations
    assert history == {"t.py::test_one": "failed A", "t.py::test_two": "failed"}
    from harness.pytest_plugin.order import _configuration

    assert _configuration(history["t.py::test_one"]) == "A" and _configuration("A") == "A"


def test_a_history_that_is_not_a_report_is_one_line(tmp_path):
    (tmp_path / "report.json").write_text("[]")
    with pytest.raises(ReportError):
        read(tmp_path / "report.json")
