"""The shard split every CI job computes alone: units (whole files for ``harness run --shard``, groups of
tests that must stay together for ``--num-shards``/``--shard-id``) onto N shards, longest first, by their
recorded seconds; and those seconds, read from what CI keeps (a report.json, a JUnit file, pytest-split's
``.test_durations``).

The split depends only on the units' names and weights, never on their order, ``PYTHONHASHSEED`` or the
checkout's location, so every job of a build agrees without talking to the others.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import re
import statistics
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.errors import HarnessError

LONGEST = 1e7  # seconds: a recorded duration past months is not one a test took
_SHARD = re.compile(r"([0-9]{1,6})/([0-9]{1,6})")  # ASCII digits only: int() would read "０" as 0


def shard_of(spec: object) -> tuple[int, int] | None:
    """``"i/N"`` (how ``--shard`` and a report write a shard) → ``(i, N)``; None when it is not that."""
    match = _SHARD.fullmatch(spec.strip()) if isinstance(spec, str) else None
    return (int(match[1]), int(match[2])) if match else None


def assign(units: Iterable[str], count: int, weights: Mapping[str, float] | None = None) -> list[list[str]]:
    """Split ``units`` into ``count`` shards, each unit in exactly one, each shard in the order given.

    With weights: longest first onto the lightest shard (LPT; ties go to the lower shard, equal units by
    name); a unit without a weight weighs the median of those with one. With none: a SHA-256 of the name,
    so a unit keeps its shard as others come and go.
    """
    if count < 1:
        raise HarnessError(f"shard count {count} must be at least 1")
    ordered = list(dict.fromkeys(units))
    known = {unit: float(weights[unit]) for unit in ordered if weights and unit in weights}
    if known:
        median = statistics.median(known.values())
        weight = {unit: known.get(unit, median) for unit in ordered}
        loads = [(0.0, shard) for shard in range(count)]
        owner: dict[str, int] = {}
        for unit in sorted(ordered, key=lambda u: (-weight[u], u)):
            load, shard = heapq.heappop(loads)
            owner[unit] = shard
            heapq.heappush(loads, (load + weight[unit], shard))
    else:
        owner = {unit: int(hashlib.sha256(unit.encode()).hexdigest(), 16) % count for unit in ordered}
    shards: list[list[str]] = [[] for _ in range(count)]
    for unit in ordered:
        shards[owner[unit]].append(unit)
    return shards


def test_seconds(path: str | os.PathLike[str]) -> tuple[dict[str, float], str]:
    """Seconds per test from ``path`` and what it was: a report.json (or the run directory holding one),
    a JUnit XML file (keyed ``classname::name``, as ``junit_key`` makes them), or pytest-split's
    ``.test_durations`` (node id → seconds). A file that is none of them is one ``HarnessError`` line."""
    seconds, source, _ = recorded(path)
    return seconds, source


def recorded(path: str | os.PathLike[str]) -> tuple[dict[str, float], str, History]:
    """``test_seconds`` and, from a report.json, its ``History`` (an empty one from the others): one read."""
    where = Path(path)
    if where.is_dir():
        where = where / "report.json"
    try:
        text = where.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise HarnessError(f"{path}: cannot read recorded durations ({error})") from None
    if text.lstrip().startswith("<"):
        return _junit(path, text), "junit", History()
    try:
        data = json.loads(text)
    except ValueError as error:
        raise HarnessError(f"{path}: neither JSON nor JUnit XML ({error})") from None
    if isinstance(data, dict) and isinstance(data.get("tests"), list):
        known = isinstance(data.get("records"), list)  # a report of runner starts: units from them
        return _report(path, data["tests"]), "report", History(data) if known else History()
    if isinstance(data, dict):
        return {str(k): _seconds(path, v) for k, v in data.items()}, "test_durations", History()
    raise HarnessError(f"{path}: expected a report.json or pytest-split's .test_durations object")


def _seconds(path: object, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= LONGEST:
        raise HarnessError(f"{path}: a duration is {str(value)[:40]!r}, not seconds from 0 to {LONGEST:g}")
    return float(value)


def _report(path: object, tests: list) -> dict[str, float]:
    found: dict[str, float] = {}
    for test in tests:
        if not isinstance(test, dict) or not isinstance(test.get("nodeid"), str):
            raise HarnessError(f"{path}: a test entry has no node id")
        phases = [test.get(k) for k in ("setup_s", "call_s", "teardown_s")]
        found[test["nodeid"]] = sum(_seconds(path, p) for p in phases if p is not None)
    return found


def _junit(path: object, text: str) -> dict[str, float]:
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as error:
        raise HarnessError(f"{path}: not well-formed JUnit XML ({error})") from None
    found: dict[str, float] = {}
    for case in root.iter("testcase"):
        given = case.get("time") or "0"
        try:
            seconds = float(given)
        except ValueError:
            raise HarnessError(f"{path}: a testcase's time is {given[:40]!r}, not seconds") from None
        found[f"{case.get('classname', '')}::{case.get('name', '')}"] = _seconds(path, seconds)
    return found


def junit_key(nodeid: str) -> str:
    """How pytest's junitxml names a test (``classname::name``): the path's ``/`` as ``.``, ``.py`` off."""
    parts = nodeid.split("::")
    module = parts[0].replace("/", ".").removesuffix(".py")
    return f"{'.'.join([module, *parts[1:-1]])}::{parts[-1]}"


class History:
    """What a previous run's report.json says about keeping tests together: the files (or package
    folders) and classes whose wider-scoped fixtures started a runner, and each test's first engine
    configuration. Without a report nothing is known: then a whole file is one unit."""

    def __init__(self, report: dict | None = None):
        self.known = report is not None
        self.together: dict[str, str] = {}  # a file, or a class's node id -> the unit that holds it
        self.configuration: dict[str, str] = {}  # node id -> fingerprint
        for record in [*(report or {}).get("records", []), *(report or {}).get("reuses", [])]:
            if not isinstance(record, dict) or not isinstance(record.get("test"), str):
                continue
            test, scope = record["test"], record.get("scope")
            file = test.split("::")[0]
            if scope == "package":
                self.together[file] = f"package {file.rpartition('/')[0]}"
            elif scope == "module":
                self.together.setdefault(file, f"file {file}")
            elif scope == "class" and test.count("::") >= 2:
                owner = test.rsplit("::", 1)[0]
                self.together.setdefault(owner, f"class {owner}")
            elif isinstance(record.get("fingerprint"), str):
                self.configuration.setdefault(test, record["fingerprint"])

    def unit(self, nodeid: str) -> str:
        """The unit ``nodeid`` is split with: its package, file or class where a wider-scoped fixture
        started a runner, its file and engine configuration, else itself; its file without a report."""
        file = nodeid.split("::")[0]
        if not self.known:
            return f"file {file}"
        owner = nodeid.rsplit("::", 1)[0]
        found = self.together.get(file) or (self.together.get(owner) if owner != file else None)
        if found is not None:
            return found
        if nodeid in self.configuration:
            return f"configuration {file} {self.configuration[nodeid]}"
        return f"test {nodeid}"
