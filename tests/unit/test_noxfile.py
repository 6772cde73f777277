"""The nox sessions: listed with descriptions and tags, and ``--no-venv`` running ``harness run`` as is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE_SESSIONS = {f"{p}_{s}": {p, s} for p in ("cuda", "rocm", "cpu") for s in ("pooling", "generation")}


def nox(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nox", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_nox_lists_the_eight_suite_sessions_with_descriptions_and_tags():
    listed = nox("-l", "--json")
    assert listed.returncode == 0, listed.stderr
    sessions = {s["name"]: s for s in json.loads(listed.stdout)}
    # cpu_vllm_upstream downloads vLLM's sdist: listed (and run) only when asked for by name
    assert set(sessions) == set(SUITE_SESSIONS) | {"tests", "lint"}
    assert [s["name"] for s in json.loads(nox("-l", "--json", "-s", "cpu_vllm_upstream").stdout)] == [
        "cpu_vllm_upstream"
    ]
    for name, must in SUITE_SESSIONS.items():
        tags = set(sessions[name]["tags"])
        assert must <= tags, name
        assert ("gpu" in tags) == (not name.startswith("cpu")), name
        description = sessions[name]["description"]
        assert description and "\n" not in description
        platform, suite = name.split("_")
        assert f"harness run {suite} --platform {platform}" in description
    assert [s["name"] for s in json.loads(nox("-l", "--json", "-t", "gpu").stdout)] == [
        "cuda_pooling",
        "cuda_generation",
        "rocm_pooling",
        "rocm_generation",
    ]


def test_no_venv_installs_nothing_and_passes_pytest_args_through(tmp_path):
    """In a copy of the noxfile's project, ``--no-venv`` runs the suite in this environment."""
    shutil.copy(ROOT / "noxfile.py", tmp_path / "noxfile.py")
    (tmp_path / "pyproject.toml").write_text('[tool.harness.suites.pooling]\npaths = ["tests"]\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "def test_wanted():\n    pass\n\ndef test_other():\n    pass\n"
    )
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    result = nox("-s", "cpu_pooling", "--no-venv", "--", "-k", "wanted", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pip install" not in result.stderr
    meta = json.loads((tmp_path / "harness-out" / "pooling-cpu" / "phases.json").read_text())
    assert meta["platform"] == "cpu"
    assert [p["name"] for p in meta["phases"]] == ["shared-engine", "standalone", "multi-gpu"]
    assert meta["phases"][0]["args"][3:5] == ["-k", "wanted"]  # ANDed with the phase's own -m
    assert [(p["exit_code"], p["args"]) for p in meta["phases"][1:]] == [(5, []), (5, [])]  # not started
    junit = (tmp_path / "harness-out" / "pooling-cpu" / "junit" / "shared-engine.xml").read_text()
    assert 'name="test_wanted"' in junit and "test_other" not in junit


def test_rocm_stops_at_a_python_other_than_3_12_before_installing(tmp_path):
    """vLLM's ROCm wheels are cp312 only: another Python would silently get the CUDA wheel from PyPI."""
    if sys.version_info[:2] == (3, 12):
        pytest.skip("this interpreter is 3.12: the session would go on to install")
    shutil.copy(ROOT / "noxfile.py", tmp_path / "noxfile.py")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    result = nox("-s", "rocm_pooling", f"--envdir={tmp_path / 'envs'}", cwd=tmp_path)
    assert result.returncode != 0
    assert "vLLM's ROCm wheels are for Python 3.12, this venv has" in result.stderr
    assert "pip install" not in result.stderr
