"""report.json's ``footprints``: each test's files, stored once each (``files``) and named by index per test
(``tests``), with each test's markers (``markers``) for ``[tool.harness.select]``'s marker rules.

A session writes ``footprints/<worker>-<pid>.json`` (``{"tests": [[nodeid, [file...]]...], "markers":
[[nodeid, [name...]]...], "children": [[token, nodeid]...]}``, redacted) and its child processes
``footprints/child-<pid>.json`` (``{"test": token, "files"}``; ``begun-<pid>.json`` at its start, so
one that died before writing is known) into its ledger directory;
``collect`` joins them, as the one loader read them (``harness.report.store.footprint_files``: this
layer is below the report's), into the report's shape. A session's file that cannot be read loses that
session's footprints: its tests count as unknown to the next selection (selected), never as empty. A
child's that cannot be read names no test, so any test may have lost files: the run keeps no footprints
(the next selection runs everything) rather than footprints that may be too narrow.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

FOLDER = "footprints"  # in each session's ledger directory


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


def collect(files: Iterable[tuple[str, Mapping[str, Any] | None]]) -> dict | None:
    """The run's footprints from its sessions' files as the one loader read them
    (``harness.report.store.footprint_files``: file name, content), None where no session recorded any.
    A child's file names its test by the session's token for it (no node id: a parameter may be a
    credential, and only the session redacts). A session's ``alive`` pairs (pid, node id) name the tests
    that ran while a process was alive (an engine a class-scoped fixture or reuse hands on): its files
    count for them too."""
    tests: dict[str, set[str]] = {}
    markers: dict[str, set[str]] = {}
    tokens: dict[str, str] = {}
    alive: dict[str, set[str]] = {}  # a child's pid -> the tests that ran while it was alive
    children: list[tuple[str, Mapping[str, Any]]] = []  # (pid, content)
    begun: dict[str, str] = {}  # a child's pid -> its test's token
    wrote: set[str] = set()  # the pids whose own file was read
    seen = False
    for name, data in files:
        seen = True
        pid = name.split("-", 1)[-1].removesuffix(".json")
        if data is None and name.startswith(("child-", "begun-")):
            print(
                f"harness: no footprints kept: {name} was unreadable, any test may lack its files",
                file=sys.stderr,
            )
            return None
        if data is None:
            continue
        if name.startswith("begun-"):
            begun[pid] = str(data.get("test"))
            continue
        if name.startswith("child-"):
            children.append((pid, data))
            wrote.add(pid)
            continue
        for test, found in _pairs(data.get("tests")):
            tests.setdefault(test, set()).update(_strings(found))
        for test, names in _pairs(data.get("markers")):
            markers.setdefault(test, set()).update(_strings(names))
        tokens.update((t, n) for t, n in _pairs(data.get("children")) if isinstance(n, str))
        for pid, test in _pairs(data.get("alive")):
            if isinstance(test, str):
                alive.setdefault(pid, set()).add(test)
    for pid, data in children:
        for owner in _owners(tokens.get(str(data.get("test"))), alive.get(pid, set())):
            tests.setdefault(owner, set()).update(_strings(data.get("files")))
    for pid, token in begun.items():  # a child died before writing: its tests are unknown, so they run
        if pid not in wrote:
            for owner in _owners(tokens.get(token), alive.get(pid, set())):
                tests.pop(owner, None)
    return encode(tests, markers) if seen else None


def _owners(starter: str | None, alive: set[str]) -> set[str]:
    """The tests a child's files count for: the one that started it and those that ran while it lived."""
    return alive | ({starter} if starter is not None else set())


def _pairs(value: object) -> list[tuple[str, Any]]:
    """A session file's ``[[key, value], ...]`` (a list: redaction never reads a node id as a field name)."""
    if not isinstance(value, list):
        return []
    return [(p[0], p[1]) for p in value if isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)]


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
