"""Every engine counted: processes a test spawns record their runners through ``pytest-gpu-harness.pth``.

The .pth is checked in a wheel and in an editable install (``pip install -e .``, as the nox ``cpu_stack``
venv installs the project) made into a scratch venv that reads the running venv's packages. The engines
are real: a spawned child's ``vllm.LLM`` and ``vllm serve`` on vLLM's CPU build (~45 s each on 2 cores).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from harness import ledger
from harness.tracking import patches, spawned

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "engines_counted"
PTH = "pytest-gpu-harness.pth"


def _pip(*args: str, python: str = sys.executable) -> None:
    subprocess.run([python, "-m", "pip", "-q", *args], check=True, capture_output=True)


def _source(directory: Path) -> Path:
    """A copy of the project to build from: a build leaves ``build/`` and ``*.egg-info`` in its source,
    and an egg-info on ``PYTHONPATH`` reads as the project installed (test_inert's wheel then is not)."""
    source = directory / "source"
    shutil.copytree(ROOT / "harness", source / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", PTH, "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    return source


def test_the_wheel_carries_the_pth(tmp_path):
    _pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(_source(tmp_path)))
    [wheel] = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read(PTH) == (ROOT / PTH).read_bytes()


@pytest.fixture
def editable(built_once) -> Path:
    """A venv with this project installed editable (its python), over the running venv's packages; built
    once per session, whichever xdist worker asks first (two tests here use it)."""

    def make(home: Path) -> None:
        subprocess.run(
            [sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(home)], check=True
        )
        python = home / "bin" / "python"
        packages = subprocess.run(
            [python, "-c", "import site; print(site.getsitepackages()[0])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        Path(packages, "_running_venv.pth").write_text(
            f"import site; site.addsitedir({site.getsitepackages()[0]!r})\n"
        )
        _pip("install", "--no-deps", "--no-build-isolation", "-e", str(_source(home)), python=str(python))
        assert Path(packages, PTH).is_file()

    return built_once("editable-venv", make) / "bin" / "python"


def _modules(python: Path, variable: str | None) -> str:
    # the footprints' variables too (this session's plugin sets them; their .pth line is its own)
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_TEST_PROCESS" and "FOOTPRINT" not in k}
    if variable is not None:
        env["HARNESS_TEST_PROCESS"] = variable
    probe = "import sys; print(sorted(m for m in sys.modules if m.startswith('harness')))"
    return subprocess.run([python, "-c", probe], env=env, check=True, capture_output=True, text=True).stdout


def test_the_pth_imports_nothing_without_the_variable(editable):
    assert _modules(editable, None) == "[]\n"
    # set: one small finder, the rest of the harness only once a runner library is imported
    assert _modules(editable, "{}") == "['harness', 'harness.tracking', 'harness.tracking.spawned']\n"


def test_the_watched_modules_are_the_wrapped_ones():
    assert spawned.WATCHED == {target.package for target in patches.TARGETS.values()}


@pytest.mark.engines(8)  # a child, two servers, this pytest: each imports vLLM; two engines start
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM's CPU build")
@pytest.mark.timeout(2400)  # three vLLM imports and two engines: ~4 min alone, far more on a busy host
def test_spawned_engines_are_counted_with_their_owners(editable, pytester, monkeypatch):
    monkeypatch.setenv("HARNESS_PLATFORM", "cpu")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    shutil.copy(DATA / "shared.py", pytester.path / "shared.py")
    shutil.copy(DATA / "suite.py", pytester.path / "test_engines.py")
    directory = pytester.path / "ledger"
    result = pytester.run(
        str(editable),
        "-m",
        "pytest",
        "--harness",
        "--harness-ledger-dir",
        str(directory),
        "-p",
        "no:cacheprovider",
        timeout=900,
    )
    result.assert_outcomes(passed=4)
    records = ledger.read(directory).records
    child, server, blocked, beside = sorted(records, key=lambda r: r["start"])
    test = "test_engines.py::"
    assert (child["test"], child["fixture"], child["outcome"]) == (
        test + "test_child_engine",
        None,
        "started",
    )
    assert (server["test"], server["fixture"], server["scope"]) == (
        test + "test_server_embeds",
        "server",
        "module",
    )
    assert server["outcome"] == "started" and server["config"]["class"] == "AsyncLLM"
    for started in (child, server):
        # its start timed within its life, between the start's line and the stop's (rounded to the ms)
        assert 0 < started["startup_s"] <= started["stop"] - started["start"] + 0.001
        assert started["held_after_start"]["cpu"] > 0
    # a second server's share does not fit beside the first: blocked in its own process, naming the first
    assert (blocked["test"], blocked["outcome"]) == (test + "test_second_server_is_blocked", "blocked")
    [holder] = blocked["holders"]
    assert "declares 0.5" in holder and "fixture `server` is module-scoped" in holder
    assert f"started in {test}test_server_embeds" in holder
    # and an engine of the test process itself, beside the live server
    assert (beside["test"], beside["outcome"], beside["worker"]) == (
        test + "test_an_engine_beside_the_server_is_blocked",
        "blocked",
        "main",
    )
    # (on the CPU the fixture is also held for the host memory its setup grew: the server's engine)
    assert any("of another process" in h and "fixture `server`" in h for h in beside["holders"])
