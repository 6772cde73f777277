"""Installed, the plugin is inert until asked: the wheel in a clean venv, pytest in an unrelated project.

The project holds stub ``vllm`` and ``transformers`` packages with the attributes the patches wrap, so a
patch shows as the ``__harness__`` flag on them; the timeout is the one in force as the test sees it
(pytest-timeout's option, else the harness watchdog's platform default);
a ledger is a ``harness-ledger-*`` directory under the run's ``TMPDIR``. Building the wheel and the venv
takes ~30 s (pip and the package index): marked ``packaging``, deselect with ``-m "not packaging"``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.packaging

STUBS = {
    "vllm/__init__.py": "from vllm.entrypoints.llm import LLM\n",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/llm.py": """
        class LLM:
            def __init__(self, model, gpu_memory_utilization=0.9):
                self.model = model
        """,
    "transformers/__init__.py": "from transformers.modeling_utils import PreTrainedModel\n",
    "transformers/modeling_utils.py": """
        class PreTrainedModel:
            @classmethod
            def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
                return cls()
        """,
}
OBSERVE = """
    import json
    import os
    from pathlib import Path

    import transformers
    import vllm


    def test_observe(request):
        Path(os.environ["OBSERVED"]).write_text(json.dumps({
            "loaded": request.config.pluginmanager.hasplugin("harness"),
            "timeout": request.config.getoption("timeout"),
            "vllm": getattr(vllm.LLM.__init__, "__harness__", False),
            "hf": getattr(transformers.PreTrainedModel.from_pretrained, "__harness__", False),
        }))
    """


@pytest.fixture(scope="module")
def venv(built_once) -> Path:
    """A clean venv with only the built wheel and its dependencies (from the package index), built once
    for the session's workers (the runs only read it)."""
    return built_once("packaging", _wheel_in_a_venv) / "venv" / "bin" / "python"


def _wheel_in_a_venv(base: Path) -> None:
    source = base / "source"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(ROOT / "harness", source / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(base / "dist"), str(source)], check=True)
    (wheel,) = (base / "dist").glob("pytest_gpu_harness-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(base / "venv")], check=True)
    python = base / "venv" / "bin" / "python"
    subprocess.run([python, "-m", "pip", "-q", "--disable-pip-version-check", "install", wheel], check=True)


def observe(python: Path, project: Path, *args: str, env: dict | None = None) -> tuple[dict, list[Path]]:
    """Run pytest in ``project``; what the test saw, and the ledger directories the run created."""
    temp = project / "tmp"
    temp.mkdir()
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("HARNESS", "PYTEST_", "PYTHON", "VIRTUAL_ENV"))
    }
    environ.update(
        TMPDIR=str(temp),
        OBSERVED=str(project / "observed.json"),
        PYTHONPATH=str(project / "stubs"),
        **env or {},
    )
    environ["HARNESS_PLATFORM"] = "cpu"  # only read where the harness acts: its timeout is the CPU one
    # where a ledger would go (a plain run's temporary ledger is removed at exit); read only if it acts
    environ["HARNESS_LEDGER_DIR"] = str(project / "ledger")
    done = subprocess.run(
        [python, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=project,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ledgers = [project / "ledger", *temp.glob("harness-ledger-*")]
    return json.loads((project / "observed.json").read_text()), [p for p in ledgers if p.exists()]


def project(tmp_path: Path, pyproject: str) -> Path:
    for name, source in STUBS.items():
        (tmp_path / "stubs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "stubs" / name).write_text(textwrap.dedent(source))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_observe.py").write_text(textwrap.dedent(OBSERVE))
    (tmp_path / "pyproject.toml").write_text(pyproject)
    return tmp_path


UNRELATED = (
    '[project]\nname = "unrelated"\nversion = "1"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
)
ASKS = UNRELATED + "\n[tool.harness]\n"


@pytest.mark.parametrize(
    ("pyproject", "args", "env"),
    [
        (UNRELATED, (), {}),
        (UNRELATED, (), {"HARNESS": "0"}),
        (ASKS, ("-p", "no:harness"), {}),
        (ASKS, ("--no-harness",), {}),
    ],
    ids=["unrelated", "HARNESS=0", "table, -p no:harness", "table, --no-harness"],
)
def test_not_asked_changes_nothing(venv, tmp_path, pyproject, args, env):
    seen, ledgers = observe(venv, project(tmp_path, pyproject), *args, env=env)
    assert seen == {"loaded": "no:harness" not in args, "timeout": None, "vllm": False, "hf": False}
    assert ledgers == []


@pytest.mark.parametrize(
    ("pyproject", "args", "env"),
    [(ASKS, (), {}), (UNRELATED, ("--harness",), {}), (UNRELATED, (), {"HARNESS": "1"})],
    ids=["[tool.harness]", "--harness", "HARNESS=1"],
)
def test_asked_sets_the_timeout_patches_and_writes_the_ledger(venv, tmp_path, pyproject, args, env):
    seen, ledgers = observe(venv, project(tmp_path, pyproject), *args, env=env)
    assert seen == {"loaded": True, "timeout": 900.0, "vllm": True, "hf": True}
    (ledger,) = ledgers
    events = [json.loads(line) for line in (ledger / "main.jsonl").read_text().splitlines()]
    assert [e["nodeid"] for e in events if e["event"] == "test"] == ["tests/test_observe.py::test_observe"]
