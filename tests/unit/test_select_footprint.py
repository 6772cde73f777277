"""Footprints (issue 59 item 1): every ``harness run`` records, per test, the files whose code ran for it:
its module's import and collection, the fixtures it uses, its own phases, and the processes it started
(spawned through ``pytest-gpu-harness.pth``, or forked); stored in report.json as ``footprints``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.report import store
from harness.select import profiler, table
from tests.unit.test_shards import harness_run

ROOT = Path(__file__).resolve().parents[2]
PTH = ROOT / "pytest-gpu-harness.pth"

PYPROJECT = """
[tool.harness.suites.tiny]
paths = ["tests"]
phases = [{name = "all", workers = "serial"}]
"""


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


SUITE = {
    "pyproject.toml": PYPROJECT,
    "pkg/__init__.py": "",
    "pkg/imported.py": "VALUE = 1\n",  # module-level code only: runs at the test module's import
    "pkg/fixture_help.py": "def build():\n    return 2\n",
    "pkg/called.py": "def call():\n    return 3\n",
    "pkg/spawned.py": "def run():\n    return 4\n",
    "pkg/forked.py": "def run():\n    return 5\n",
    "pkg/unused.py": "def never():\n    return 6\n",
    "pkg/killed.py": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "tests/conftest.py": """
        import pytest

        @pytest.fixture(scope="module")
        def built():
            from pkg.fixture_help import build
            return build()
        """,
    "tests/test_one.py": """
        import pkg.imported

        def test_uses_fixture(built):
            assert built == 2

        def test_also_uses_fixture(built):  # the module-scoped fixture ran in the first test's setup
            assert built == 2

        def test_calls():
            from pkg.called import call
            assert call() == 3
        """,
    "tests/test_two.py": f"""
        import multiprocessing, os, subprocess, sys

        PTH = {str(PTH)!r}

        def test_spawns():  # as a .pth runs at an interpreter's start
            code = "exec(open(PTH).read().splitlines()[1]); from pkg.spawned import run; run()"
            subprocess.run([sys.executable, "-c", "PTH = " + repr(PTH) + "; " + code], check=True)

        def test_spawns_one_that_is_killed():  # no exit, so no file of its own
            code = "exec(open(PTH).read().splitlines()[1]); import pkg.killed"
            done = subprocess.run([sys.executable, "-c", "PTH = " + repr(PTH) + "; " + code])
            assert done.returncode == -9

        def _child():  # pkg.forked is imported in the forked child only
            from pkg.forked import run
            run()

        def test_forks():
            process = multiprocessing.get_context("fork").Process(target=_child)
            process.start()
            process.join()
            assert process.exitcode == 0
        """,
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, frozenset[str]]:
    root = tmp_path_factory.mktemp("footprints")
    write(root, SUITE)
    done = harness_run(root, "tiny", "--out", "out", HARNESS_FOOTPRINTS="1")
    assert done.returncode == 0, done.stdout + done.stderr
    decoded = table.decode(json.loads((root / "out" / "report.json").read_text())["footprints"])
    assert not isinstance(decoded, str), decoded
    return decoded[0]


def test_a_module_import_counts_for_each_test_of_the_module(recorded):
    """Old code: no footprints at all."""
    for test in ("test_uses_fixture", "test_also_uses_fixture", "test_calls"):
        assert {"pkg/imported.py", "tests/test_one.py"} <= recorded[f"tests/test_one.py::{test}"]
    assert "pkg/imported.py" not in recorded["tests/test_two.py::test_spawns"]


def test_a_wider_fixture_counts_for_every_test_that_uses_it(recorded):
    assert "pkg/fixture_help.py" in recorded["tests/test_one.py::test_uses_fixture"]
    assert "pkg/fixture_help.py" in recorded["tests/test_one.py::test_also_uses_fixture"]
    assert "pkg/fixture_help.py" not in recorded["tests/test_one.py::test_calls"]
    assert "tests/conftest.py" in recorded["tests/test_one.py::test_also_uses_fixture"]


def test_a_test_records_what_it_called_and_nothing_unused(recorded):
    assert "pkg/called.py" in recorded["tests/test_one.py::test_calls"]
    assert "pkg/called.py" not in recorded["tests/test_one.py::test_uses_fixture"]
    assert not any("pkg/unused.py" in files for files in recorded.values())


def test_spawned_and_forked_processes_count_for_the_test_that_started_them(recorded):
    """A child records the files of the modules it imported (an engine loop would pay a profiler per call)."""
    assert "pkg/spawned.py" in recorded["tests/test_two.py::test_spawns"]
    assert "pkg/forked.py" in recorded["tests/test_two.py::test_forks"]
    assert "pkg/spawned.py" not in recorded["tests/test_two.py::test_forks"]


def test_a_child_killed_by_sigkill_has_written_what_it_imported_until_then(recorded):
    """A child writes its files as it imports them (tests/unit/test_engine_footprints.py): one killed by
    SIGKILL in a module's body keeps that module. One that wrote nothing leaves its test unknown (there)."""
    assert "pkg/killed.py" in recorded["tests/test_two.py::test_spawns_one_that_is_killed"]
    assert "tests/test_two.py::test_spawns" in recorded  # its neighbour's child wrote


@pytest.mark.parametrize("armed", [False, True])
def test_the_pth_line_imports_no_harness_module(tmp_path, armed):
    """Every interpreter of the environment runs it. Unarmed it does nothing; armed it loads the recorder
    by its file, as ``_harness_footprint``: importing ``harness`` there would keep a pytest started in a
    test from rewriting its asserts (PytestAssertRewriteWarning), and cost every child the package."""
    code = f"exec(open({str(PTH)!r}).read().splitlines()[1]); import sys; "
    code += "print(sorted(m for m in sys.modules if m.startswith(('harness', '_harness'))))"
    env = {k: v for k, v in os.environ.items() if "FOOTPRINT" not in k and k != "HARNESS_TEST_PROCESS"}
    if armed:
        env.update({profiler.DIRECTORY: str(tmp_path), profiler.TEST: "token"})
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ("['_harness_footprint']" if armed else "[]")
    written = [json.loads(p.read_text())["test"] for p in tmp_path.glob("child-*.json")]
    assert written == (["token"] if armed else [])


def test_paths_name_files_under_their_root_and_nothing_else(tmp_path):
    package = tmp_path / "site" / "vllm"
    package.mkdir(parents=True)
    paths = profiler.Paths({str(tmp_path / "repo"): "", str(package): "vllm"})
    assert paths.name(str(tmp_path / "repo" / "a b" / "ü.py")) == "a b/ü.py"
    assert paths.name(str(package / "pooling" / "x.py")) == "vllm/pooling/x.py"
    assert paths.name(str(tmp_path / "repository" / "x.py")) is None  # a sibling sharing a prefix
    assert paths.name("<frozen importlib._bootstrap>") is None
    assert paths.name(sys.__file__ if hasattr(sys, "__file__") else os.__file__) is None


def test_a_venv_inside_the_rootdir_is_not_the_repositorys_but_a_named_package_in_it_is(tmp_path):
    """nox keeps its venvs in the rootdir (``.nox/``). Old code named every installed file there as the
    repository's: a vLLM CPU pooling test's footprint held 5 987 files, 4 930 of them the venv's."""
    site = tmp_path / "repo" / ".nox" / "s" / "lib" / "python3.11" / "site-packages"
    paths = profiler.Paths({str(tmp_path / "repo"): "", str(site / "vllm"): "vllm"})
    assert paths.name(str(site / "torch" / "nn" / "functional.py")) is None
    assert paths.name(str(tmp_path / "repo" / "venv" / "lib" / "dist-packages" / "x.py")) is None
    assert paths.name(str(site / "vllm" / "model_executor" / "models" / "bert.py")) == (
        "vllm/model_executor/models/bert.py"
    )
    assert (
        paths.name(str(tmp_path / "repo" / "site-packages.py")) == "site-packages.py"
    )  # a file, not a folder


names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


@given(st.dictionaries(names, st.sets(names, max_size=6), max_size=8))
def test_the_report_shape_keeps_every_test_s_files(tests):
    encoded = json.loads(json.dumps(table.encode(tests, {})))
    decoded = table.decode(encoded)
    assert not isinstance(decoded, str)
    assert decoded[0] == {test: frozenset(files) for test, files in tests.items()}


@pytest.mark.parametrize(
    "section",
    [
        None,
        [],
        {"files": "x", "tests": {}},
        {"files": ["a"], "tests": {"t": [1]}},
        {"files": ["a"], "tests": {"t": [True]}},
    ],
)
def test_a_malformed_section_is_a_reason_not_a_crash(section):
    assert isinstance(table.decode(section), str)


def test_an_unreadable_session_file_loses_only_its_own_footprints(tmp_path):
    folder = tmp_path / "phase" / table.FOLDER
    folder.mkdir(parents=True)
    (folder / "gw0-1.json").write_text('{"tests": [["t::a", ["x.py"]]], "children": [["gw0-1-0", "t::a"]]}')
    (folder / "gw1-2.json").write_text("{not json")
    (folder / "child-3.json").write_text('{"test": "gw0-1-0", "files": ["y.py"]}')
    (folder / "child-4.json").write_text('{"test": "no-such-token", "files": ["z.py"]}')
    found = table.decode(table.collect(store.footprint_files([tmp_path / "phase"])))
    assert not isinstance(found, str)
    assert found[0] == {"t::a": frozenset({"x.py", "y.py"})}
    assert table.collect(store.footprint_files([tmp_path / "nothing"])) is None


def test_an_earlier_run_s_footprints_in_the_same_directory_are_not_this_run_s(tmp_path):
    """Clearing a run directory leaves files it does not know; an earlier run's footprints are older than
    this run's start. Old code: collect read them, so a deleted test kept a footprint."""
    folder = tmp_path / "phase" / table.FOLDER
    folder.mkdir(parents=True)
    (folder / "main-1.json").write_text('{"tests": [["t::old", ["x.py"]]]}')
    (folder / "main-2.json").write_text('{"tests": [["t::new", ["y.py"]]]}')
    os.utime(folder / "main-1.json", (1000.0, 1000.0))
    found = table.decode(table.collect(store.footprint_files([tmp_path / "phase"], since=2000.0)))
    assert not isinstance(found, str) and set(found[0]) == {"t::new"}


@pytest.mark.parametrize("asked", [{}, {"HARNESS_FOOTPRINTS": "0"}], ids=["plain", "off"])
def test_a_run_without_selection_records_no_footprints(tmp_path, asked):
    """Footprints cost CPU in every test's process (an engine test: 64 -> 105 CPU-s, docs/selection.md):
    a run records them only where selection is in use or they are asked for. Old code: every run did."""
    write(tmp_path, {"pyproject.toml": PYPROJECT, "tests/test_one.py": "def test_one():\n    pass\n"})
    done = harness_run(tmp_path, "tiny", "--out", "out", **asked)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "footprints" not in json.loads((tmp_path / "out" / "report.json").read_text())


def test_no_footprint_file_carries_a_credential_a_test_id_holds(tmp_path):
    """A parameter may be a credential (the ledger's rule): the session's file is redacted, and a child's
    names its test by a token. Old code: node ids were written raw."""
    secret = "hf_s3cr3tvalue0123"
    test = f"""
        import subprocess, sys
        import pytest

        @pytest.mark.parametrize("value", [{secret!r}])
        def test_uses(value):
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        """
    write(tmp_path, {"pyproject.toml": PYPROJECT, "tests/test_one.py": test})
    done = harness_run(tmp_path, "tiny", "--out", "out", HF_TOKEN=secret, HARNESS_FOOTPRINTS="1")
    assert done.returncode == 0, done.stdout + done.stderr
    written = list((tmp_path / "out").rglob(f"{table.FOLDER}/*.json"))
    assert len(written) == 3 and not [p for p in written if secret in p.read_text()]  # session, begun, child
    tests = json.loads((tmp_path / "out" / "report.json").read_text())["footprints"]["tests"]
    assert list(tests) == ["tests/test_one.py::test_uses[[redacted]]"]
