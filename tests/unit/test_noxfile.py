"""The nox sessions: listed with descriptions and tags, and ``--no-venv`` running ``harness run`` as is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE_SESSIONS = {
    f"{p}_{s}": {p, s} for p in ("cuda", "rocm", "xpu", "cpu") for s in ("pooling", "generation")
}


def nox(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nox", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_nox_lists_the_suite_sessions_with_descriptions_and_tags():
    listed = nox("-l", "--json", "-t", "cpu", "gpu")
    assert listed.returncode == 0, listed.stderr
    sessions = {s["name"]: s for s in json.loads(listed.stdout)}
    # cpu_vllm_upstream downloads vLLM's sdist: listed (and run) only when asked for by name
    assert set(sessions) == set(SUITE_SESSIONS) | {"tests", "cpu_stack"}
    assert [s["name"] for s in json.loads(nox("-l", "--json", "-s", "cpu_vllm_upstream").stdout)] == [
        "cpu_stack",
        "cpu_vllm_upstream",
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
        "xpu_pooling",
        "xpu_generation",
    ]


def test_nox_alone_selects_lint_and_tests_and_lists_one_line_each():
    """A plain ``nox`` runs lint and the tests (and the CPU stack the tests run in), no GPU suite."""
    listed = nox("-l")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    selected = {line.split()[1] for line in lines if line.startswith("* ")}
    assert selected == {"lint", "tests", "cpu_stack"}
    sessions = [line for line in lines if line.startswith(("* ", "- "))]
    assert len(sessions) == len(SUITE_SESSIONS) + 4  # cpu_stack, tests, lint, cpu_vllm_upstream
    assert len(lines) == len(sessions) + 6  # the noxfile's one-line docstring, a header, a legend, 3 blanks


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


@pytest.mark.packaging
def wheel(folder: Path, name: str, version: str) -> None:
    """An empty package's wheel, in ``folder`` only (as the ``+cpu`` torch lies in the CPU machines' pip
    wheel folder)."""
    folder.mkdir()
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as archive:
        archive.writestr(
            f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        tags = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        archive.writestr(f"{dist}.dist-info/WHEEL", tags)
        archive.writestr(
            f"{dist}.dist-info/RECORD", f"{dist}.dist-info/METADATA,,\n{dist}.dist-info/WHEEL,,\n"
        )


def test_the_cpu_stack_is_one_venv_installed_through_nox(tmp_path):
    """``--install-only`` fills ``cpu_stack``'s venv and runs nothing; ``-R`` then installs nothing, and
    the suite session runs in that venv with none of its own. A suite project whose ``cpu`` extra is the
    harness stands in for the vLLM stack (~30 s of pip), beside a package that only pip's wheel folder
    (``PIP_FIND_LINKS``) holds: uv, where it fills the venv, is handed that folder."""
    shutil.copy(ROOT / "noxfile.py", tmp_path / "noxfile.py")
    wheel(tmp_path / "wheels", "only-in-the-wheel-folder", "1.0+cpu")
    env = {**os.environ, "PIP_FIND_LINKS": f"{os.environ.get('PIP_FIND_LINKS', '')} {tmp_path / 'wheels'}"}
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent(f"""
            [project]
            name = "suite"
            version = "0"

            [project.optional-dependencies]
            cpu = ["pytest-gpu-harness @ {ROOT.as_uri()}", "only-in-the-wheel-folder==1.0+cpu"]
            models = []
            test = []

            [tool.setuptools]
            packages = []

            [tool.harness.suites.pooling]
            paths = ["tests"]
            """)
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    installed = nox("-s", "cpu_pooling", "--install-only", cwd=tmp_path, env=env)
    assert installed.returncode == 0, installed.stderr
    # `uv pip install` where uv is installed (pip's sources before the requirements), `python -m pip
    # install` otherwise
    install = next(line for line in installed.stderr.splitlines() if "pip install" in line)
    assert install.endswith("-e '.[cpu,models,test]' tblib"), install
    assert list(
        (tmp_path / ".nox" / "cpu_stack").glob(
            "lib/*/site-packages/only_in_the_wheel_folder-1.0+cpu.dist-info"
        )
    )
    assert not (tmp_path / "harness-out").exists()
    reused = nox("-R", "-s", "cpu_pooling", cwd=tmp_path, env=env)
    assert reused.returncode == 0, reused.stderr
    assert "pip install" not in reused.stderr and "pip uninstall" not in reused.stderr
    assert (
        f"{tmp_path / '.nox' / 'cpu_stack' / 'bin' / 'harness'} run --platform cpu pooling" in reused.stderr
    )
    assert (tmp_path / "harness-out" / "pooling-cpu" / "report.json").is_file()
    assert sorted(p.name for p in (tmp_path / ".nox").iterdir() if p.is_dir()) == [".cache", "cpu_stack"]
