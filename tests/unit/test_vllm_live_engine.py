"""The live-engine regression (vLLM PR #52570) on vLLM's real CPU build: one pytest run of both shapes.

``embed_module_scoped.py`` keeps a module-scoped pooling engine (0.5 of NUMA node 0) alive while a later
test builds its own (0.7): vLLM alone fails that start after ~25 s here ("Available memory on node 0 (5.64/
8.71 GiB) ... less than desired CPU memory utilization (0.8, 6.97 GiB)" with 0.8; on a GPU it would wait
240 s); the harness stops it before the engine is built, naming the fixture. ``embed_class_scoped.py``,
the fix, passes with one start per engine configuration. Each engine start costs ~30 s on 2 cores. A last
test kills the module engine's process between two calls: its failure is classed engine-died.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections import Counter
from pathlib import Path

import pytest

from harness import ledger

pytest_plugins = ["pytester"]
DATA = Path(__file__).parent / "vllm_live_engine"

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM's CPU build"),
    pytest.mark.engines(7),  # a run importing vLLM, three starts of two processes each
]


def test_live_module_engine_is_named_and_class_scope_passes(pytester, monkeypatch):
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    # the KV cache sized in GiB, as vLLM's CPU CI does: the class-scoped 0.7 then starts whatever other
    # engines (other tests' beside this one) hold of node 0; the harness still blocks on declared shares
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    shutil.copy(DATA / "shared.py", pytester.path / "shared.py")
    shutil.copy(DATA / "embed_module_scoped.py", pytester.path / "test_embed_module_scoped.py")
    shutil.copy(DATA / "embed_class_scoped.py", pytester.path / "test_embed_class_scoped.py")
    directory = pytester.path / "ledger"
    result = pytester.runpytest_subprocess(
        "--harness", "--harness-ledger-dir", str(directory), "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*live-runner-overlap*fixture `embedder` is module-scoped and lives until the end of "
            "test_embed_module_scoped.py; class scope or an explicit close before this test frees it*",
            "FAILED test_embed_module_scoped.py::test_own_engine - harness.errors.RunnerBl*",
        ]
    )
    merged = ledger.read(directory)
    classes = {t["nodeid"]: t.get("failure_class") for t in merged.tests if t["outcome"] == "failed"}
    assert classes == {  # why each failed, produced for real
        "test_embed_module_scoped.py::test_own_engine": "start-blocked",
        "test_embed_module_scoped.py::test_engine_dies_under_the_test": "engine-died",
    }
    leaky = [r for r in merged.records if r["file"] == "test_embed_module_scoped.py"]
    assert [(r["fixture"], r["outcome"]) for r in leaky] == [("embedder", "started"), (None, "blocked")]
    assert "started in test_embed_module_scoped.py::test_shared_embedding" in leaky[1]["holders"][0]
    fixed = [r for r in merged.records if r["file"] == "test_embed_class_scoped.py"]
    assert {r["outcome"] for r in fixed} == {"started"}
    per_configuration = Counter(r["fingerprint"] for r in fixed)
    assert sorted(per_configuration.values()) == [1, 1]
    assert {r["config"]["gpu_memory_utilization"] for r in fixed} == {0.5, 0.7}
