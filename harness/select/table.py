"""report.json's ``footprints``: each test's files, stored once each (``files``) and named by index per test
(``tests``), with each test's markers (``markers``) for ``[tool.harness.select]``'s marker rules.

A session writes ``footprints/<worker>.json`` (``{"tests": {nodeid: [file...]}, "markers": {...}}``) and its
child processes ``footprints/child-<pid>.json`` (``{"test", "files"}``) into its ledger directory;
``collect`` reads them back into the report's shape. A file that cannot be read loses that process's
footprint only: its tests then count as unknown to the next selection (selected), never as empty.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

FOLDER = "footprints"


def encode(tests: Mapping[str, Iterable[str]], markers: Mapping[str, Iterable[str]]) -> dict:
    """The report's shape of per-test file sets."""
    files = sorted({name for found in tests.values() for name in found})
    index = {name: i for i, name in enumerate(files)}
    return {
        "files": files,
        "tests": {test: sorted(index[name] for name in set(found)) for test, found in sorted(tests.items())},
        "markers": {test: sorted(set(names)) for test, names in sorted(markers.items()) if names},
    }


def decode(section: object) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]] | str:
    """Per test its files and its markers, from a report's ``footprints``; a line saying why not when the
    section is missing or malformed."""
    if not isinstance(section, dict):
        return "it records no footprints (a run before footprints, or without them)"
    files, tests, markers = section.get("files"), section.get("tests"), section.get("markers", {})
    if not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
        return "its footprints' files are not a list of paths"
    if not isinstance(tests, dict) or not isinstance(markers, dict):
        return "its footprints' tests are not a table"
    found: dict[str, frozenset[str]] = {}
    for test, indices in tests.items():
        if not isinstance(indices, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(files) for i in indices
        ):
            return f"its footprint of {test} names no recorded file"
        found[test] = frozenset(files[i] for i in indices)
    marks = {
        t: frozenset(m)
        for t, m in markers.items()
        if isinstance(m, list) and all(isinstance(x, str) for x in m)
    }
    return found, marks


def collect(directories: Iterable[Path], since: float | None = None) -> dict | None:
    """The run's footprints from its sessions' folders (None where no session recorded any); files older
    than ``since`` (the run's start) are an earlier run's in the same directory, which clearing it leaves."""
    tests: dict[str, set[str]] = {}
    markers: dict[str, set[str]] = {}
    seen = False
    for directory in directories:
        folder = Path(directory) / FOLDER
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                if since is not None and path.stat().st_mtime < since:
                    continue
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(data, dict):
                continue
            seen = True
            if path.name.startswith("child-"):
                if isinstance(data.get("test"), str) and isinstance(data.get("files"), list):
                    files = (f for f in data["files"] if isinstance(f, str))
                    tests.setdefault(data["test"], set()).update(files)
                continue
            for test, files in (data.get("tests") or {}).items():
                tests.setdefault(test, set()).update(f for f in files if isinstance(f, str))
            for test, names in (data.get("markers") or {}).items():
                markers.setdefault(test, set()).update(n for n in names if isinstance(n, str))
    return encode(tests, markers) if seen else None
