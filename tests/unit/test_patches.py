"""Foreign-runner tracking against a stub ``vllm`` package shaped like vLLM 0.32's: the import hook, and
what happens when vLLM moves ``LLM`` or its engine internals. Tracking never breaks the suite and never
fails silently: each problem is a ``not-tracked`` finding, and ``harness doctor`` names it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from harness import ledger
from tests.conftest import ROOT

pytest_plugins = ["pytester"]

# vllm/__init__.py resolves LLM lazily, as vLLM's own does (MODULE_ATTRS and a module __getattr__)
PACKAGE = """
import importlib

MODULE_ATTRS = {{"LLM": "{where}"}}


def __getattr__(name):
    module, attribute = MODULE_ATTRS[name].split(":")
    return getattr(importlib.import_module(module, __name__), attribute)
"""
ENGINE = """
import types


class EngineCoreClient:
    def __init__(self):
        self.stopped = False
        self.resources = types.SimpleNamespace(engine_dead=False, engine_manager=None)

    def shutdown(self):
        self.stopped = True
        self.resources.engine_dead = True


class LLMEngine:
    def __init__(self):
        self.engine_core = EngineCoreClient()

    def has_unfinished_requests(self):
        return False

    def is_sleeping(self):
        return False
"""
LLM = """
import types


class LLM:
    def __init__(self, model, *, gpu_memory_utilization=0.92, tensor_parallel_size=1, **kwargs):
        self.model = model
        {engine}
"""
WITH_ENGINE = "self.llm_engine = LLMEngine()"
NO_ENGINE = "self.engine = None  # internals moved: no llm_engine.engine_core"


def stub(root, where=".entrypoints.llm:LLM", engine=WITH_ENGINE, module="llm.py", name="LLM"):
    """A stub ``vllm`` under ``root``: class ``name`` defined in ``vllm/entrypoints/<module>``."""
    package = root / "stub" / "vllm"
    (package / "entrypoints").mkdir(parents=True)
    (package / "__init__.py").write_text(PACKAGE.format(where=where))
    (package / "entrypoints" / "__init__.py").write_text("")
    source = ENGINE + textwrap.dedent(LLM).replace("{engine}", engine).replace("class LLM", f"class {name}")
    (package / "entrypoints" / module).write_text(source)
    return root / "stub"


@pytest.fixture
def run_with_stub(pytester, monkeypatch):
    """Run a suite over the stub on the CPU platform; returns pytest's result and the merged ledger."""
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")

    def run(suite: str, *args: str, **shape):
        if not (pytester.path / "stub").exists():
            path = stub(pytester.path, **shape)
            monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(path), str(ROOT)]))
        pytester.makepyfile(test_suite=textwrap.dedent(suite))
        directory = pytester.path / "ledger"
        shutil.rmtree(directory, ignore_errors=True)
        result = pytester.runpytest_subprocess(
            "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider", *args
        )
        return result, ledger.read(directory)

    return run


def not_tracked(merged) -> list[str]:
    return [f["message"] for f in merged.findings if f["type"] == "not-tracked"]


STARTS_AND_STOPS = """
    import gc

    def test_engine():
        from vllm import LLM

        llm = LLM("org/model", tensor_parallel_size=1)
        assert llm.model == "org/model"
        {stop}
    """


def test_the_import_hook_wraps_the_stub_llm_and_records_its_explicit_stop(run_with_stub):
    suite = STARTS_AND_STOPS.replace("{stop}", "llm.llm_engine.engine_core.shutdown()")
    result, merged = run_with_stub(suite)
    result.assert_outcomes(passed=1)
    (record,) = merged.records
    assert (record["kind"], record["model"], record["outcome"]) == ("vllm", "org/model", "started")
    assert record["test"] == "test_suite.py::test_engine" and record["stop"] is not None
    assert not_tracked(merged) == []


# vLLM's engine shape as reset and state read it, its client a multiprocess one
REUSABLE = """self.llm_engine = LLMEngine()
        self.llm_engine.engine_core.__class__ = type("SyncMPClient", (EngineCoreClient,), {})
        self.llm_engine.vllm_config = types.SimpleNamespace(
            model_config=types.SimpleNamespace(enable_sleep_mode=False),
            lora_config=None,
            cache_config=types.SimpleNamespace(enable_prefix_caching=False),
        )"""

# a runner shaped like vLLM's conftest's: its __exit__ shuts the engine core down and drops the LLM
OWN_RUNNER = """
    import copy

    import pytest

    CLIENTS = []


    class Runner:
        def __init__(self, model, **kwargs):
            from vllm import LLM

            self.llm = LLM(model, **kwargs)
            CLIENTS.append(self.llm.llm_engine.engine_core)

        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            self.llm.llm_engine.engine_core.shutdown()
            del self.llm


    @pytest.mark.parametrize("share", [0.3, 0.4])
    def test_first(share):
        with Runner("org/model", gpu_memory_utilization=share) as runner:
            copy.copy(runner.llm)  # copy and pickle call LLM.__new__ without arguments


    @pytest.mark.parametrize("share", [0.3, 0.4])
    def test_again(share):
        with Runner("org/model", gpu_memory_utilization=share):
            pass
        assert CLIENTS[-1] is CLIENTS[-2]  # test_first's of its share, run just before (grouped)
        assert not any(client.stopped for client in CLIENTS)  # parked, not shut down
    """


def test_an_engine_a_suites_own_runner_shuts_down_is_parked_and_handed_on(run_with_stub, monkeypatch):
    monkeypatch.setenv("HARNESS_REUSE", "1")
    result, merged = run_with_stub(OWN_RUNNER, engine=REUSABLE)
    result.assert_outcomes(passed=4)
    # first run, no history: test_first[0.3] and test_again[0.3] run together, then the 0.4 pair
    assert [r["test"].removeprefix("test_suite.py::") for r in merged.records] == [
        "test_first[0.3]",
        "test_first[0.4]",
    ]
    assert all(r["stop"] is not None for r in merged.records)  # shut down at the session's end
    assert [r["test"].removeprefix("test_suite.py::") for r in merged.reuses] == [
        "test_again[0.3]",
        "test_again[0.4]",
    ]
    assert merged.refusals == [] and not_tracked(merged) == []


def test_an_engine_in_this_process_is_not_parked_and_the_ledger_says_why(run_with_stub, monkeypatch):
    monkeypatch.setenv("HARNESS_REUSE", "1")
    engine = REUSABLE.replace('"SyncMPClient"', '"InprocClient"')
    suite = OWN_RUNNER.replace("CLIENTS[-1] is CLIENTS[-2]", "CLIENTS[-1] is not CLIENTS[-2]").replace(
        "assert not any(client.stopped for client in CLIENTS)", "assert all(c.stopped for c in CLIENTS)"
    )
    result, merged = run_with_stub(suite, engine=engine)
    result.assert_outcomes(passed=4)
    assert len(merged.records) == 4 and merged.reuses == []
    assert {r["reason"] for r in merged.refusals} == {
        "its engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0): cleanup would end it"
    }


def test_missing_engine_internals_fall_back_to_the_llms_lifetime(run_with_stub):
    suite = STARTS_AND_STOPS.replace("{stop}", "del llm\n        gc.collect()")
    result, merged = run_with_stub(suite, engine=NO_ENGINE)
    result.assert_outcomes(passed=1)  # the user's LLM(...) returned: no exception from the harness
    (record,) = merged.records
    assert record["outcome"] == "started" and record["stop"] is not None  # stopped when collected
    (message,) = not_tracked(merged)
    assert "vllm.LLM internals moved" in message and "'LLM' object has no attribute 'llm_engine'" in message


def test_an_llm_the_library_moved_is_a_finding_not_a_silent_zero(run_with_stub):
    suite = STARTS_AND_STOPS.replace("{stop}", "")
    result, merged = run_with_stub(suite, where=".entrypoints.offline:LLM", module="offline.py")
    result.assert_outcomes(passed=1)
    assert merged.records == []
    (message,) = not_tracked(merged)
    assert message.startswith("vllm.LLM is not tracked: it is loaded from vllm.entrypoints.offline")


def test_a_watched_module_without_llm_is_a_finding_and_the_import_still_works(run_with_stub):
    suite = """
        def test_import():
            import vllm.entrypoints.llm

            assert vllm.entrypoints.llm.OfflineLLM
        """
    result, merged = run_with_stub(suite, name="OfflineLLM")
    result.assert_outcomes(passed=1)  # the hook's failed wrap did not fail the suite's import
    (message,) = not_tracked(merged)
    assert message.startswith("vllm.LLM is not tracked: vllm.entrypoints.llm changed (AttributeError: ")


@pytest.mark.parametrize(
    ("shape", "status"),
    [
        ({}, "tracked (vllm.entrypoints.llm.LLM)"),
        ({"name": "OfflineLLM"}, "not tracked: vllm.entrypoints.llm has no LLM (the library moved it)"),
        (
            {"where": ".entrypoints.offline:LLM", "module": "offline.py"},
            "not tracked: vllm.entrypoints.llm not found (the library moved it)",
        ),
    ],
)
def test_doctor_says_whether_the_installed_vllm_llm_is_tracked(tmp_path, shape, status):
    path = stub(tmp_path, **shape)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(ROOT)]), "HARNESS_PLATFORM": "cpu"}
    done = subprocess.run(
        [sys.executable, "-m", "harness", "doctor", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tracking"]["vllm.LLM"] == status


# a test that fails only on a handed-on engine (state no reset knows of), then one that fails on any
SENSITIVE_SUITE = (
    OWN_RUNNER.split("    @pytest.mark.parametrize")[0]
    + """
    def test_first():
        with Runner("org/model") as runner:
            runner.llm.llm_engine.engine_core.left = "state no reset knows of"  # its client's: not compared


    def test_needs_a_fresh_engine():
        with Runner("org/model") as runner:
            assert not hasattr(runner.llm.llm_engine.engine_core, "left"), "handed the first test's engine"


    def test_between():
        with Runner("org/model"):
            pass


    def test_fails_on_any_engine():
        with Runner("org/model"):
            raise AssertionError("fails on every engine")
    """
)


def test_a_test_that_fails_only_on_a_handed_on_engine_passes_on_fresh_ones_with_a_finding(
    run_with_stub, monkeypatch, pytester
):
    """The safety net: run again on the engine it failed on, then on fresh engines; each try in the
    terminal (RERUN), one result in JUnit; the finding names the test; a failure on fresh engines too is
    reported failed, once."""
    monkeypatch.setenv("HARNESS_REUSE", "1")
    result, merged = run_with_stub(SENSITIVE_SUITE, "--junitxml=junit.xml", engine=REUSABLE)
    result.assert_outcomes(passed=3, failed=1)
    name = "test_suite.py::test_"
    assert [r["test"].removeprefix(name) for r in merged.records] == [
        "first",
        "needs_a_fresh_engine",  # its second try: what it starts is parked after it
        "fails_on_any_engine",  # its second try
    ]
    assert [r["test"].removeprefix(name) for r in merged.reuses] == [
        "needs_a_fresh_engine",
        "needs_a_fresh_engine",  # its replay on the engine it failed on: fails again
        "between",  # the fresh retry's engine
        "fails_on_any_engine",
        "fails_on_any_engine",  # its replay
    ]
    reruns = [(r["test"].removeprefix(name), r["attempt"], r["outcome"], r["result"]) for r in merged.reruns]
    assert reruns == [
        ("needs_a_fresh_engine", 2, "failed", "passed"),
        ("needs_a_fresh_engine", 3, "passed", "passed"),
        ("fails_on_any_engine", 2, "failed", "failed"),
        ("fails_on_any_engine", 3, "failed", "failed"),
    ]
    assert result.parseoutcomes()["rerun"] == 4  # every try that does not count, in the open
    [finding] = [f for f in merged.findings if f["type"] == "reuse-sensitive"]
    assert finding["test"] == f"{name}needs_a_fresh_engine"
    assert "AssertionError: handed the first test's engine" in finding["message"]
    junit = (pytester.path / "junit.xml").read_text()
    assert junit.count("<testcase ") == 4 and junit.count("<failure ") == 1
    assert [(t["nodeid"].removeprefix(name), t["outcome"]) for t in merged.tests] == [
        ("first", "passed"),
        ("needs_a_fresh_engine", "passed"),
        ("between", "passed"),
        ("fails_on_any_engine", "failed"),
    ]
    result.stdout.fnmatch_lines(["*reuse-sensitive: test_suite.py::test_needs_a_fresh_engine failed on a*"])

    # the next run, given this one's findings as history, starts that test fresh without a first try
    (pytester.path / "configurations.json").write_text(json.dumps({finding["test"]: "reuse-sensitive"}))
    monkeypatch.setenv("HARNESS_CONFIGURATIONS", str(pytester.path / "configurations.json"))
    result, merged = run_with_stub(SENSITIVE_SUITE.split("    def test_between")[0])
    result.assert_outcomes(passed=2)
    assert [r["test"].removeprefix(name) for r in merged.records] == ["first", "needs_a_fresh_engine"]
    assert not [f for f in merged.findings if f["type"] == "reuse-sensitive"]
    [refusal] = merged.refusals  # the first test's warm engine, shut down as that test begins
    assert "reuse-sensitive" in refusal["reason"] and refusal["test"] == finding["test"]


def test_every_field_the_writer_writes_is_one_the_checker_declares(run_with_stub, monkeypatch, pytester):
    """harness.ledger.check.FIELDS is the one declaration of each event's fields: a reuse session's
    ledger (starts, hand-ons, refusals, findings, tests) writes no field it does not declare."""
    from harness.ledger.check import FIELDS, problem

    monkeypatch.setenv("HARNESS_REUSE", "1")
    run_with_stub(SENSITIVE_SUITE, engine=REUSABLE)
    events = [
        json.loads(line)
        for path in sorted((pytester.path / "ledger").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert {"runner-start", "runner-reused", "reuse-refused", "finding", "test"} <= {
        e["event"] for e in events
    }
    undeclared = {
        (event["event"], name)
        for event in events
        for name in event
        if name not in ("event", "t", "sync") and name not in FIELDS.get(event["event"], {})
    }
    assert undeclared == set()
    assert [problem(event) for event in events if problem(event)] == []


def test_an_unset_share_is_what_vllm_resolves_it_to_not_a_crash(pytester, run_with_stub, monkeypatch):
    """vLLM 0.34's ``LLM`` defaults ``gpu_memory_utilization`` to None and resolves it at start (0.92 off
    CUDA and ROCm): every start used to raise ``float(None)`` under the harness."""
    shape_034 = stub(pytester.path)
    source = shape_034 / "vllm" / "entrypoints" / "llm.py"
    source.write_text(
        source.read_text().replace("gpu_memory_utilization=0.92", "gpu_memory_utilization=None")
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(shape_034), str(ROOT)]))
    result, merged = run_with_stub(
        STARTS_AND_STOPS.replace("{stop}", "llm.llm_engine.engine_core.shutdown()")
    )
    result.assert_outcomes(passed=1)
    (record,) = merged.records
    assert record["fraction"] == 0.92


@pytest.mark.parametrize(
    ("vendor", "config", "share"),
    [
        ("nvidia", {}, 1.0),  # the extensible KV cache, 0.34's default on CUDA and ROCm
        ("amd", {}, 1.0),
        ("nvidia", {"enable_extensible_kv_cache": False}, 0.92),
        ("intel", {}, 0.92),
    ],
)
def test_vllm_034s_unset_share_resolves_per_platform(fake_gpus, vendor, config, share):
    from harness.config.settings import load_settings
    from harness.platform import detect
    from harness.tracking import context
    from harness.tracking.vllm.key import declared_share
    from tests.fakes import gpu

    fake_gpus([gpu(0)], vendor=vendor)
    platform = detect(dict(os.environ)).platform
    previous = context.use(context.Context(platform, load_settings(platform.name, env={})))
    try:
        assert declared_share(None, config) == share
        assert declared_share(0.5, config) == 0.5
    finally:
        context.use(previous)
