"""The budget of starts, on a real run: ``harness run generation`` on the CPU, as CI runs it.

One vLLM start per engine configuration and one HF start per HF configuration: the ledger must show each
configuration (fingerprint) started exactly once, stopped, and owned by the fixture designed to own it.
Through ``harness run`` the shared-engine phase runs under pytest-xdist's ``loadscope`` order, which
switches the model parameter class by class: a cache keyed on the session fixture alone would start
the HF models twice. It starts two real vLLM CPU engines (~1.5 min here); skipped without vLLM.
"""

import importlib.util
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from harness import ledger

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.engines(3)  # a run importing vLLM, one start of two processes
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_generation_suite_starts_each_configuration_once(tmp_path):
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/models/generation",
            "-k",
            "llama",
            "-q",
            "-p",
            "no:cacheprovider",
        ]
        + ["--harness-ledger-dir", str(tmp_path)],
        cwd=ROOT,
        # a cache of its own: a reference another run computed would be read, not started
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    records = ledger.read(tmp_path).records
    starts = Counter((r["kind"], r["fingerprint"]) for r in records)
    assert sorted(kind for kind, _ in starts) == ["hf", "vllm"], starts
    assert set(starts.values()) == {1}, f"a configuration started more than once: {starts}"
    assert all(r["outcome"] == "started" and r["stop"] is not None for r in records), records
    owners = {r["kind"]: (r["fixture"], r["scope"]) for r in records}
    assert owners == {"vllm": ("engine", "class"), "hf": ("hf_outputs", "session")}
    overlaps = [
        f for f in ledger.read(tmp_path).findings if f["type"] in ("never-stopped", "live-runner-overlap")
    ]
    assert overlaps == []
