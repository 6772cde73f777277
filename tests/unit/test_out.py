"""Every ``--out`` writes a regular file or refuses in one line with exit 2 (``harness.report.out``): a
device, FIFO, socket or directory there, or a symlink to one, is never replaced; a regular file or a new
path is written whole."""

from __future__ import annotations

import json
import os
import socket
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cli import main as harness
from harness.errors import HarnessError
from harness.report import out

RUNS = Path(__file__).resolve().parents[2] / "docs" / "runs"
KINDS = [
    "fifo",
    "directory",
    "socket",
    "to /dev/null",
    "to fifo",
    "to directory",
    "regular",
    "new",
    "to regular",
]
WRITABLE = ("regular", "new", "to regular")


def make(path: Path, kind: str) -> None:
    """Put a thing of ``kind`` at ``path``."""
    if kind in ("fifo", "to fifo"):
        os.mkfifo(path if kind == "fifo" else path.with_name("fifo"))
    elif kind in ("directory", "to directory"):
        (path if kind == "directory" else path.with_name("dir")).mkdir()
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.close()
    elif kind in ("regular", "to regular"):
        (path if kind == "regular" else path.with_name("file")).write_text("old\n")
    if kind.startswith("to "):
        names = {"to /dev/null": "/dev/null", "to fifo": "fifo", "to directory": "dir", "to regular": "file"}
        path.symlink_to(names[kind])


def identity(path: Path) -> tuple:
    """What the path is: its kind and inode, and those of what a symlink names."""
    here = os.lstat(path) if os.path.lexists(path) else None
    there = os.stat(path) if os.path.exists(path) else None
    return tuple((stat.S_IFMT(s.st_mode), s.st_ino) if s else None for s in (here, there))


def run_dir(root: Path) -> Path:
    """A run directory killed before its first phase: ``harness report`` builds its (empty) report."""
    run = root / "run"
    run.mkdir()
    (run / "phases.json").write_text(json.dumps({"suite": "s", "platform": "cpu", "phases": []}))
    return run


@settings(max_examples=80, deadline=None)
@given(kind=st.sampled_from(KINDS), command=st.sampled_from(["flaky", "report", "merge"]))
def test_out_never_replaces_a_non_regular_file(kind: str, command: str) -> None:
    with tempfile.TemporaryDirectory() as name:
        root = Path(name)
        if command == "flaky":
            target = root / "out.json"
            argv = ["flaky", str(RUNS / "pooling-cpu.json"), "--out", str(target)]
        elif command == "report":
            target = run_dir(root) / "report.json"
            argv = ["report", str(target.parent)]
        else:  # a file merge writes inside its --out directory
            (root / "merged").mkdir()
            target = root / "merged" / "summary.md"
            argv = ["merge", str(RUNS / "pooling-cpu.json"), "--out", str(root / "merged")]
        make(target, kind)
        before = identity(target)
        with pytest.MonkeyPatch.context() as patch:
            patch.delenv("GITHUB_STEP_SUMMARY", raising=False)
            patch.delenv("BUILDKITE", raising=False)
            code = harness(argv)
        if kind in WRITABLE:
            assert code == 0
            assert stat.S_ISREG(os.stat(target).st_mode) and Path(target).read_text() != "old\n"
        else:
            assert code == 2
            assert identity(target) == before  # the thing itself, untouched
            if command == "merge":
                assert not (root / "merged" / "report.json").exists()  # all checked before any is written


def test_a_directory_or_device_given_to_flaky_is_one_line(tmp_path: Path, capsys) -> None:
    for given_ in (tmp_path, Path("/dev/null")):
        assert harness(["flaky", str(RUNS / "pooling-cpu.json"), "--out", str(given_)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("harness: error: --out ")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_merge_out_that_is_not_a_directory_is_one_line(tmp_path: Path, capsys) -> None:
    os.mkfifo(tmp_path / "fifo")
    assert harness(["merge", str(RUNS / "pooling-cpu.json"), "--out", str(tmp_path / "fifo")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a directory (a FIFO)" in err
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)


def test_a_symlink_to_a_regular_file_writes_the_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("old")
    (tmp_path / "link").symlink_to("file")
    out.write(tmp_path / "link", "new")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "file").read_text() == "new"


def test_a_nul_byte_or_unwritable_parent_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for bad in ("a\0b", str(tmp_path / "file" / "below")):
        with pytest.raises(HarnessError):
            out.write(bad, "text")


@pytest.mark.parametrize("kind", ["fifo", "socket", "to /dev/null", "regular"])
def test_harness_run_out_that_is_not_a_directory_is_one_line(
    tmp_path: Path, monkeypatch, capsys, kind
) -> None:
    """``harness run --out`` names a run directory: anything else there is one line, exit 2, untouched."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.harness.suites.s]\npaths = ["tests"]\n\n[[tool.harness.suites.s.phases]]\nname = "p"\n'
    )
    (tmp_path / "tests").mkdir()
    monkeypatch.chdir(tmp_path)
    make(tmp_path / "out", kind)
    before = identity(tmp_path / "out")
    assert harness(["run", "--platform", "cpu", "--out", str(tmp_path / "out"), "s"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("harness: error: --out ")
    assert identity(tmp_path / "out") == before
