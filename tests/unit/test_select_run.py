"""``harness run --changed-since REF --history DIR [--shadow]`` on a real git repository (issue 59 items 2-4):
the tests a change touches run, the others are reported skipped by selection (JUnit, report.json, the
summary); shadow runs everything and names the false greens; ``harness selection`` gives the rates; hostile
inputs select everything with one line saying why, or refuse in one line with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.select import SELECTION
from tests.unit.test_shards import harness, harness_run

PYPROJECT = """
[tool.harness.suites.tiny]
paths = ["tests"]
phases = [{name = "all", workers = "serial"}]

[tool.harness.suites.other]
paths = ["tests"]
phases = [{name = "all", workers = "serial"}]

[tool.harness.select]
"docs/**" = []
"""

FILES = {
    "pyproject.toml": PYPROJECT,
    ".gitignore": "out*/\nhist/\n__pycache__/\n",
    "pkg/__init__.py": "",
    "pkg/a.py": "def fa():\n    return 1\n",
    "pkg/b.py": "def fb():\n    return 2\n",
    "pkg/spaced ü.py": "def fu():\n    return 3\n",
    "docs/readme.md": "docs\n",
    "tests/test_a.py": """
        from pkg.a import fa

        def test_a():
            assert fa() == 1
        """,
    "tests/test_b.py": """
        import os
        from pkg.b import fb

        def test_b():
            assert fb() == 2

        def test_b_fails_when_asked():
            assert os.environ.get("FAIL") != "b"
        """,
    "tests/test_u.py": """
        import importlib

        def test_u():
            assert importlib.import_module("pkg.spaced ü").fu() == 3
        """,
}
A, B, B2, U = (
    "tests/test_a.py::test_a",
    "tests/test_b.py::test_b",
    "tests/test_b.py::test_b_fails_when_asked",
    "tests/test_u.py::test_u",
)


def git(root: Path, *args: str) -> str:
    command = ["git", "-C", str(root), "-c", "user.email=h@x", "-c", "user.name=h", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A repository with one commit and a full run of it (hist/): the history CI keeps."""
    root = tmp_path_factory.mktemp("selecting") / "repo"
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "one")
    done = harness_run(root, "tiny", "--out", "hist", HARNESS_FOOTPRINTS="1")  # a branch build's
    assert done.returncode == 0, done.stdout + done.stderr
    return root


@pytest.fixture
def repo(recorded: Path, tmp_path: Path) -> Path:
    """A clone of it per test (its history copied), on a branch: the test changes it freely."""
    root = tmp_path / "clone ü"  # a checkout path with a space and unicode
    subprocess.run(["git", "clone", "-q", str(recorded), str(root)], check=True)
    subprocess.run(["cp", "-r", str(recorded / "hist"), str(root / "hist")], check=True)
    git(root, "checkout", "-qb", "change")
    return root


def report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def outcomes(out: Path) -> dict[str, str]:
    return {t["nodeid"]: t["outcome"] for t in report(out)["tests"]}


def select(root: Path, *more: str, **env: str) -> subprocess.CompletedProcess:
    return harness_run(
        root, "tiny", "--out", "out", "--changed-since", "main", "--history", "hist", *more, **env
    )


def test_a_change_runs_the_tests_that_ran_its_file_and_reports_the_rest_skipped_by_selection(repo):
    """Old code: --changed-since was no option (exit 2)."""
    (repo / "pkg" / "a.py").write_text("def fa():\n    return 1  # edited, not committed\n")
    done = select(repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert outcomes(repo / "out") == {A: "passed", B: "skipped", B2: "skipped", U: "skipped"}
    selection = report(repo / "out")["selection"]
    assert selection["mode"] == "on" and selection["changed"] == ["pkg/a.py"]
    assert selection["selected"] == {A: "it ran pkg/a.py"}
    assert sorted(selection["skipped"]) == [B, B2, U] and selection["false_green"] is None
    junit = (repo / "out" / "junit.xml").read_text()
    assert junit.count('message="harness: not selected') == 3
    summary = (repo / "out" / "summary.md").read_text()
    assert "1 selected, 3 skipped" in summary and "1 because it ran pkg/a.py" in summary
    assert "1 selected, 3 skipped" in done.stderr


def test_a_committed_change_a_new_test_and_an_ignored_file(repo):
    (repo / "pkg" / "spaced ü.py").write_text("def fu():\n    return 3  # edited\n")
    (repo / "docs" / "readme.md").write_text("more docs\n")
    (repo / "tests" / "test_new.py").write_text("def test_new():\n    pass\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "two")
    done = select(repo)
    assert done.returncode == 0, done.stdout + done.stderr
    selection = report(repo / "out")["selection"]
    assert selection["selected"] == {
        U: "it ran pkg/spaced ü.py",
        "tests/test_new.py::test_new": "the history does not know it",
    }
    assert selection["ignored"] == ["docs/readme.md"]


def test_shadow_runs_everything_unchanged_and_names_the_false_greens(repo):
    (repo / "pkg" / "a.py").write_text("def fa():\n    return 1  # edited\n")
    plain = harness_run(repo, "tiny", "--out", "out-plain", FAIL="b")
    done = select(repo, "--shadow", FAIL="b")
    assert done.returncode == plain.returncode == 1, done.stdout + done.stderr
    assert outcomes(repo / "out") == outcomes(repo / "out-plain")  # shadow changes no outcome
    starts = report(repo / "out")["starts"]["total"]["starts"]
    assert starts == report(repo / "out-plain")["starts"]["total"]["starts"]
    selection = report(repo / "out")["selection"]
    assert selection["mode"] == "shadow" and selection["false_green"] == [B2]
    assert "harness_selection" in (repo / "out" / "junit.xml").read_text()
    assert (
        "false greens (failed, but selection would skip them): 1" in (repo / "out" / "summary.md").read_text()
    )
    rates = harness(repo, "selection", "out", "hist")
    assert rates.returncode == 1, rates.stdout + rates.stderr  # a false green
    assert "false-green rate 1/1 shadow builds (100%)" in rates.stdout
    assert "hist: no selection recorded" in rates.stdout


@pytest.mark.parametrize(
    ("spoil", "said"),
    [
        (lambda r: r.pop("footprints"), "records no footprints"),
        (lambda r: r.update(suite="other"), "is of suite 'other' on 'cpu', this run is 'tiny'"),
        (None, "report"),  # corrupt: not JSON
        # another interpreter: no diff shows it, and it can break a test the change never touched
        (lambda r: r["versions"].update(python="2.7.18"), "ran on python 2.7.18, this run 3."),
    ],
)
def test_a_history_that_cannot_say_selects_everything_and_says_why(repo, spoil, said):
    (repo / "pkg" / "a.py").write_text("def fa():\n    return 1  # edited\n")
    path = repo / "hist" / "report.json"
    if spoil is None:
        path.write_text("{not json")
    else:
        data = json.loads(path.read_text())
        spoil(data)
        path.write_text(json.dumps(data))
    done = select(repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(outcomes(repo / "out").values()) == {"passed"}
    selection = report(repo / "out")["selection"]
    assert selection["skipped"] == [] and said in selection["everything"]
    assert any(said in line and "every test selected" in line for line in done.stderr.splitlines())


def test_an_unknown_ref_is_refused_in_one_line(repo):
    done = harness_run(repo, "tiny", "--out", "out", "--changed-since", "no-such-branch", "--history", "hist")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "harness: error: --changed-since no-such-branch: no such revision here (fetch it first)"
    ]
    done = harness_run(repo, "tiny", "--out", "out", "--shadow")
    assert done.returncode == 2 and "give REF too" in done.stderr and "Traceback" not in done.stderr


def test_a_shallow_clone_without_the_merge_base_selects_everything(recorded, tmp_path):
    origin = tmp_path / "origin"
    subprocess.run(["git", "clone", "-q", str(recorded), str(origin)], check=True)
    (origin / "pkg" / "b.py").write_text("def fb():\n    return 2  # main moved on\n")
    git(origin, "commit", "-qam", "main moves")
    git(origin, "checkout", "-qb", "feature", "HEAD~1")
    (origin / "pkg" / "a.py").write_text("def fa():\n    return 1  # feature\n")
    git(origin, "commit", "-qam", "feature")
    shallow = tmp_path / "shallow"
    url = f"file://{origin}"
    subprocess.run(["git", "clone", "-q", "--depth", "1", "-b", "feature", url, str(shallow)], check=True)
    git(shallow, "fetch", "-q", "--depth", "1", "origin", "main:main")
    subprocess.run(["cp", "-r", str(recorded / "hist"), str(shallow / "hist")], check=True)
    done = select(shallow)
    assert done.returncode == 0, done.stdout + done.stderr
    selection = report(shallow / "out")["selection"]
    assert (
        selection["skipped"] == []
        and "no merge base of HEAD and main (a shallow clone" in selection["everything"]
    )


def test_a_detached_head_a_rename_and_a_deletion(repo):
    git(repo, "mv", "pkg/b.py", "pkg/b2.py")
    test_b = repo / "tests" / "test_b.py"
    test_b.write_text(test_b.read_text().replace("pkg.b ", "pkg.b2 "))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "rename")
    git(repo, "checkout", "-q", "--detach")
    done = select(repo)
    assert done.returncode == 0, done.stdout + done.stderr
    selection = report(repo / "out")["selection"]
    assert set(selection["selected"]) == {B, B2}, selection  # the renamed file's tests
    assert "pkg/b.py" in selection["changed"] and "pkg/b2.py" in selection["changed"]
    git(repo, "rm", "-q", "docs/readme.md")
    (repo / "pkg" / "spaced ü.py").unlink()  # deleted in the working tree: its test runs (and fails)
    done = select(repo)
    assert done.returncode == 1, done.stdout + done.stderr
    assert outcomes(repo / "out")[U] == "failed"
    assert report(repo / "out")["selection"]["skipped"] == [A]


def test_a_global_file_and_an_unexplained_file_select_everything(repo):
    (repo / "tests" / "conftest.py").write_text("# a new conftest\n")
    done = select(repo)
    assert "tests/conftest.py changed, and it is global" in report(repo / "out")["selection"]["everything"]
    (repo / "tests" / "conftest.py").unlink()
    (repo / "pkg" / "weights.bin").write_bytes(b"\0")
    done = select(repo)
    assert done.returncode == 0, done.stdout + done.stderr
    found = report(repo / "out")["selection"]["everything"]
    assert found == "pkg/weights.bin changed, and no footprint and no rule explains it"


def test_merge_joins_every_shard_s_footprints_and_selection(repo):
    """Old code: the merged report kept the first shard's footprints and selection only, so the other
    shards' tests were unknown to the next build and their false greens were lost."""
    (repo / "pkg" / "a.py").write_text("def fa():\n    return 1  # edited\n")
    for index in range(2):
        done = select(repo, "--shadow", "--shard", f"{index}/2", FAIL="b")
        assert done.returncode in (0, 1), done.stdout + done.stderr
        (repo / "out").rename(repo / f"out-{index}")
    merged = harness(repo, "merge", "out-0", "out-1", "--out", "merged")
    assert merged.returncode in (0, 1), merged.stdout + merged.stderr
    found = report(repo / "merged")
    assert sorted(found["footprints"]["tests"]) == sorted([A, B, B2, U])
    assert found["selection"]["false_green"] == [B2]
    assert sorted([*found["selection"]["selected"], *found["selection"]["skipped"]]) == sorted([A, B, B2, U])


def test_ci_s_variable_selects_on_a_pull_request_and_runs_everything_on_a_branch(repo):
    """``HARNESS_SELECT`` (a pipeline's setting): a pull request's build selects since its base branch; a
    branch's build (the default branch refreshing the history) runs everything and records no selection."""
    (repo / "pkg" / "a.py").write_text("def fa():\n    return 1  # edited\n")
    given = {"HARNESS_SELECT": "on", "GITHUB_BASE_REF": "main"}
    done = harness_run(repo, "tiny", "--out", "out", "--history", "hist", **given)
    assert done.returncode == 0, done.stdout + done.stderr
    selection = report(repo / "out")["selection"]
    assert (selection["ref"], selection["mode"], sorted(selection["skipped"])) == (
        "origin/main",
        "on",
        [B, B2, U],
    )
    done = harness_run(repo, "tiny", "--out", "out", "--history", "hist", HARNESS_SELECT="shadow")
    assert done.returncode == 0 and "not a pull request's build, so every test runs" in done.stderr
    assert "selection" not in report(repo / "out") and "footprints" in report(repo / "out")
    done = harness_run(
        repo, "tiny", "--out", "out", "--history", "hist", HARNESS_SELECT="off", GITHUB_BASE_REF="main"
    )
    assert done.returncode == 0  # a project's opt-out: a pull request's build runs all, records nothing
    assert "selection" not in report(repo / "out") and "footprints" not in report(repo / "out")
    done = harness_run(repo, "tiny", "--out", "out", HARNESS_SELECT="always")
    assert done.returncode == 2 and "HARNESS_SELECT='always': expected one of off, on, shadow" in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "wrong shape"])
def test_a_selection_list_that_is_no_list_file_is_one_line_and_never_blocks(tmp_path, kind):
    """Old code: the session read the run's selection list with ``read_text`` (a FIFO without a writer
    hung pytest; ``"skipped": "a"`` skipped nothing, silently). Now the one loader refuses each at once."""
    (tmp_path / "test_x.py").write_text("def test_x(): pass\n")
    path = tmp_path / "list"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        path = Path("/dev/zero")
    else:
        path.write_text(json.dumps({"mode": "on", "ref": "main", "skipped": "test_x.py::test_x"}))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--harness", "test_x.py"],
        cwd=tmp_path,
        env={**os.environ, SELECTION: str(path)},
        capture_output=True,
        text=True,
        timeout=120,  # old code: a FIFO never returned
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if "selection list" in line]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
