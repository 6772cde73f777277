"""The footprint files a run's sessions write are read by the one loader (``harness.report.store``), as
every file the harness reads back: bounded, checked against their schema, a bad one left out in one line
(that process's footprint lost, its tests then unknown to the next selection: they run)."""

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
    (folder / "child-5.json").write_text(json.dumps({"tests": [["t::a", ["x.py"]]]}))  # a session's shape
    (folder / "main-6.json").write_text("[" * 100)  # nested past the loader's depth, or truncated
    read = store.footprint_files([tmp_path / "phase"])
    assert [name for name, _ in read] == ["child-2.json", "main-1.json"]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4 and all(line.startswith("harness: footprint left out: ") for line in err)
    found = table.decode(table.collect(read))
    assert not isinstance(found, str) and found[0] == {"t::a": frozenset({"a.py", "engine.py"})}


def test_no_footprint_files_is_no_footprints_not_empty_ones(tmp_path):
    (tmp_path / "phase" / table.FOLDER).mkdir(parents=True)
    assert store.footprint_files([tmp_path / "phase", tmp_path / "absent"]) == []
    assert table.collect([]) is None  # the next selection: "recorded without footprints", every test runs
