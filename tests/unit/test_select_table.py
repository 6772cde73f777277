"""The footprint files a run's sessions write are read by the one loader (``harness.report.store``), as
every file the harness reads back: bounded, checked against their schema, a bad one said in one line (a
session's: its tests then unknown to the next selection, so they run; a child's: no footprints kept)."""

from __future__ import annotations

import json
import os

import pytest

from harness.report import store
from harness.select import table


@pytest.mark.timeout(120)
def test_a_fifo_or_a_malformed_footprint_file_is_left_out_in_one_line_and_the_rest_is_read(tmp_path, capsys):
    """Old code: ``table`` read each file itself with ``read_text``: a FIFO there hung the report (no
    writer ever comes), and a file of the wrong shape was taken as far as it went."""
    folder = tmp_path / "phase" / table.FOLDER
    folder.mkdir(parents=True)
    (folder / "main-1.json").write_text(
        json.dumps({"tests": [["t::a", ["a.py"]]], "children": [["k", "t::a"]]})
    )
    (folder / "child-2.json").write_text(json.dumps({"test": "k", "files": ["engine.py"]}))
    os.mkfifo(folder / "main-3.json")
    (folder / "main-4.json").write_text(json.dumps({"tests": "t::b"}))  # not pairs
    (folder / "main-6.json").write_text("[" * 100)  # nested past the loader's depth, or truncated
    read = store.footprint_files([tmp_path / "phase"])
    assert [name for name, data in read if data is not None] == ["child-2.json", "main-1.json"]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("harness: footprint left out: ") for line in err)
    found = table.decode(table.collect(read))
    assert not isinstance(found, str) and found[0] == {"t::a": frozenset({"a.py", "engine.py"})}


def test_no_footprint_files_is_no_footprints_not_empty_ones(tmp_path):
    (tmp_path / "phase" / table.FOLDER).mkdir(parents=True)
    assert store.footprint_files([tmp_path / "phase", tmp_path / "absent"]) == []
    assert table.collect([]) is None  # the next selection: "recorded without footprints", every test runs


@pytest.mark.parametrize("content", ['{"test": "k", "files": ["eng', '{"tests": [["t::a", ["x.py"]]]}', ""])
def test_an_unreadable_child_file_keeps_no_footprints_rather_than_narrow_ones(tmp_path, capsys, content):
    """A child's file names its test only inside it: cut short (a child killed while writing, before writes
    became whole-or-absent) or malformed, any test may have lost an engine's files. Old code left the file
    out and kept the rest: ``t::a`` without ``engine.py``, so a change to the engine skipped it."""
    folder = tmp_path / "phase" / table.FOLDER
    folder.mkdir(parents=True)
    (folder / "main-1.json").write_text(
        json.dumps({"tests": [["t::a", ["a.py"]]], "children": [["k", "t::a"]]})
    )
    (folder / "child-2.json").write_text(content)
    assert table.collect(store.footprint_files([tmp_path / "phase"])) is None
    assert capsys.readouterr().err.count("no footprints kept: child-2.json") == 1


def test_a_begun_child_with_no_file_of_its_own_leaves_its_test_unknown(tmp_path):
    folder = tmp_path / "phase" / table.FOLDER
    folder.mkdir(parents=True)
    session = {
        "tests": [["t::a", ["a.py"]], ["t::b", ["b.py"]]],
        "children": [["ka", "t::a"], ["kb", "t::b"]],
    }
    (folder / "main-1.json").write_text(json.dumps(session))
    for pid, token in ((7, "ka"), (8, "kb")):
        (folder / f"begun-{pid}.json").write_text(json.dumps({"test": token}))
    (folder / "child-7.json").write_text(json.dumps({"test": "ka", "files": ["engine.py"]}))
    found = table.decode(table.collect(store.footprint_files([tmp_path / "phase"])))
    assert not isinstance(found, str) and found[0] == {"t::a": frozenset({"a.py", "engine.py"})}
