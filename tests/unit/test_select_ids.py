"""The ids in ``<out>/selection-skipped.json`` (what a phase's session skips) are the form report.json and
JUnit name tests by: pytest's node ids from the rootdir, also where the rootdir is below the repository's
top, for parametrized ids (escaped unicode, ``/``, spaces, brackets) and class methods; each one matches a
test the phase skipped, so none is skipped silently or left to run by a mismatch."""

from __future__ import annotations

import json
import subprocess
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from harness.split import junit_key
from tests.unit.test_shards import harness_run

FILES = {
    "proj/pyproject.toml": """
        [tool.pytest.ini_options]
        pythonpath = ["."]

        [tool.harness.suites.tiny]
        paths = ["tests"]
        phases = [{name = "all", workers = "serial"}]
        """,
    "proj/pkg/__init__.py": "",
    "proj/pkg/a.py": "def fa():\n    return 1\n",
    "proj/tests/test_a.py": """
        import pytest
        from pkg.a import fa

        @pytest.mark.parametrize("x", ["é", "a/b", "sp ace", "[br]", "k::v"])
        def test_p(x):
            assert fa() == 1

        class TestC:
            def test_m(self):
                assert fa() == 1
        """,
    "proj/tests/test_b.py": "def test_b():\n    pass\n",
    ".gitignore": "out/\nhist/\n__pycache__/\n",
}


def _git(root: Path, *args: str) -> None:
    command = ["git", "-C", str(root), "-c", "user.email=h@x", "-c", "user.name=h", *args]
    subprocess.run(command, check=True, capture_output=True)


def test_the_skipped_list_names_tests_as_report_json_and_junit_do(tmp_path):
    root = tmp_path / "repo"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "one")
    project = root / "proj"  # pytest's rootdir, one folder below the repository's top
    done = harness_run(project, "tiny", "--out", "hist", HARNESS_FOOTPRINTS="1")
    assert done.returncode == 0, done.stdout + done.stderr
    (project / "tests" / "test_b.py").write_text("def test_b():\n    pass  # edited\n")
    done = harness_run(project, "tiny", "--out", "out", "--changed-since", "main", "--history", "hist")
    assert done.returncode == 0, done.stdout + done.stderr
    listed = json.loads((project / "out" / "selection-skipped.json").read_text())["skipped"]
    report = json.loads((project / "out" / "report.json").read_text())
    skipped = [t["nodeid"] for t in report["tests"] if t["outcome"] == "skipped"]
    assert len(listed) == 6 and sorted(listed) == sorted(skipped) == sorted(report["selection"]["skipped"])
    assert all(nodeid.startswith("tests/test_a.py::") for nodeid in listed)  # from the rootdir, not the top
    assert [t["nodeid"] for t in report["tests"] if t["outcome"] == "passed"] == ["tests/test_b.py::test_b"]
    cases = ElementTree.parse(project / "out" / "junit.xml").getroot().iter("testcase")
    junit = {f"{c.get('classname')}::{c.get('name')}" for c in cases if c.find("skipped") is not None}
    assert junit == {junit_key(nodeid) for nodeid in listed}
