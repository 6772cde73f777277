"""The shard split every CI job computes alone: units (whole files for ``harness run``'s split, groups of
tests that must stay together for pytest's own ``--num-shards``/``--shard-id``) onto N shards, longest
first, weighed by recorded seconds (read from what CI keeps by the one loader,
``harness.report.store.recorded``) under one rule for a missing or meaningless one (``weigh``). ``Shard`` is
a shard's one shape; ``Plan.record`` what a shard job records of its split, so ``harness merge`` can prove
that the shards ran the selection, each test once.

The split depends only on the tests' names and weights, never on their order, ``PYTHONHASHSEED`` or the
checkout's location, so every job of a build agrees without talking to the others; ``plan`` checks at run
time that it placed every test exactly once.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from harness.errors import HarnessError, ReportError

LONGEST = 1e7  # seconds: a recorded duration past months is not one a test took
MAX_SHARDS = 1024  # far more CI jobs than any build runs; a bigger N is a typo
DEFAULT_S = 1.0  # a test's weight where nothing at all is recorded
FLOOR_S = 0.001  # the least a test weighs: where seconds say nothing (0 s), the split is by test count
_SHARD = re.compile(r"([0-9]{1,6})/([0-9]{1,6})")  # ASCII digits only: int() would read "０" as 0


@dataclass(frozen=True)
class Shard:
    """One shard of a split: ``index`` (0-based) of ``count``, the one shape ``--shard i/N``,
    ``--num-shards/--shard-id``, the ledger's ``shard`` event, phases.json and ``harness merge`` share.
    Built only in range (``1 <= count <= MAX_SHARDS``, ``0 <= index < count``): else one
    ``HarnessError`` line."""

    index: int
    count: int

    def __post_init__(self) -> None:
        _check(self.index, self.count, "shard", f"{self.index}/{self.count}")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def name(self) -> str:
        """The shard in a file or directory name (``harness-out/<suite>-<platform>-<name>``)."""
        return name(self.index, self.count)

    @classmethod
    def of_record(cls, record: Mapping[str, object], source: str = "shard record") -> Shard:
        """The shard a split's record (``Plan.record``: phases.json's ``split``, the ledger's ``shard``
        event) is of; out of range or missing: one line naming ``source``."""
        return cls.of(record.get("index"), record.get("count"), source)

    @classmethod
    def of(cls, index: object, count: object, source: str = "shard") -> Shard:
        """``index`` of ``count`` as given (flags, a record's fields); out of range: one line naming
        ``source``."""
        _check(index, count, source, f"{index}/{count}")
        return cls(index, count)  # type: ignore[arg-type]

    @classmethod
    def parse(cls, spec: object, source: str = "shard") -> Shard:
        """``"i/N"`` (how ``--shard`` and a report write a shard) → ``Shard``; anything else, or out of
        range, is one ``HarnessError`` line naming ``source``."""
        match = _SHARD.fullmatch(spec.strip()) if isinstance(spec, str) else None
        if match is None:
            shown = repr(spec)[:80]
            raise HarnessError(
                f"{source} {shown} is not 'i/N' with whole numbers of up to 6 digits (0-based i, e.g. 0/4)"
            )
        index, count = int(match[1]), int(match[2])
        _check(index, count, source, repr(spec))
        return cls(index, count)


def name(index: int | str, count: int) -> str:
    """The one formatter of a shard in names: ``<i>of<N>``, where ``i`` may also be a pattern (a glob's
    ``*``, a CI variable) that stands for every shard or the job's own."""
    return f"{index}of{count}"


def from_flags(count: int | None, index: int | None) -> Shard | None:
    """pytest-shard's ``--num-shards``/``--shard-id`` as a shard, None when neither is given; a half pair
    or a pair out of range is one ``HarnessError`` line (every place that accepts the flags says the same)."""
    if count is None and index is None:
        return None
    if count is None or index is None:
        given, missing = ("--shard-id", "--num-shards") if count is None else ("--num-shards", "--shard-id")
        raise HarnessError(f"{given} without {missing}: give both (pytest-shard's flags) or neither")
    return Shard.of(index, count, "--num-shards/--shard-id")


def _check(index: object, count: object, source: str, shown: str) -> None:
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (index, count)):
        raise HarnessError(f"{source} {shown}: index and count must be whole numbers")
    assert isinstance(index, int) and isinstance(count, int)
    if count > MAX_SHARDS:
        raise HarnessError(f"{source} {shown}: N may be at most {MAX_SHARDS}")
    if count < 1 or not 0 <= index < count:
        raise HarnessError(f"{source} {shown} is out of range: need 0 <= i < N and N >= 1")


def assign(units: Iterable[str], count: int, weights: Mapping[str, float] | None = None) -> list[list[str]]:
    """Split ``units`` into ``count`` shards, each unit in exactly one, each shard in the order given.

    Longest first onto the lightest shard (LPT; ties go to the lower shard, equal units by name). A unit
    without a usable weight weighs as ``weigh`` fills a test (the median of the usable ones, else
    ``DEFAULT_S``); none less than ``FLOOR_S``. Without weights every unit weighs the same: by count.
    """
    if count < 1:
        raise HarnessError(f"shard count {count} must be at least 1")
    ordered = list(dict.fromkeys(units))
    weight = _filled({unit: (weights or {}).get(unit) for unit in ordered}, lambda unit: unit, math.inf)
    loads = [(0.0, shard) for shard in range(count)]
    owner: dict[str, int] = {}
    for unit in sorted(ordered, key=lambda u: (-weight[u], u)):
        load, shard = heapq.heappop(loads)
        owner[unit] = shard
        heapq.heappush(loads, (load + weight[unit], shard))
    shards: list[list[str]] = [[] for _ in range(count)]
    for unit in ordered:
        shards[owner[unit]].append(unit)
    return shards


def _usable(value: object, most: float = LONGEST) -> float | None:
    """A duration as LPT can add it (finite, not negative; within ``FLOOR_S``..``most``), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return min(max(float(value), FLOOR_S), most)


def weigh(nodeids: Iterable[str], seconds: Mapping[str, float]) -> dict[str, float]:
    """Each test's weight, the one rule for a missing duration: its record (by node id, or JUnit's
    ``classname::name``); a test without a usable one (missing, negative, NaN, infinite) weighs its file's
    median, else the median of every usable record, else ``DEFAULT_S``; none weighs less than ``FLOOR_S``
    (0 s: the split is by test count) or more than ``LONGEST``."""
    found = {n: seconds.get(n, seconds.get(junit_key(n))) for n in nodeids}
    return _filled(found, lambda nodeid: nodeid.split("::")[0])


def _filled(
    found: Mapping[str, object], group: Callable[[str], str], most: float = LONGEST
) -> dict[str, float]:
    """``weigh``'s rule over any names: a usable value as it is (within ``FLOOR_S``..``most``), else the
    median of its group's usable values, else of all, else ``DEFAULT_S``."""
    known: dict[str, float] = {}
    for name, value in found.items():
        if (usable := _usable(value, most)) is not None:
            known[name] = usable
    by_group: dict[str, list[float]] = {}
    for name, usable in known.items():
        by_group.setdefault(group(name), []).append(usable)
    overall = statistics.median(known.values()) if known else DEFAULT_S
    medians = {key: statistics.median(values) for key, values in by_group.items()}
    return {name: known[name] if name in known else medians.get(group(name), overall) for name in found}


@dataclass(frozen=True)
class Plan:
    """A split of one selection: per shard its node ids (in the order given) and predicted seconds, and
    what it was computed from (``digest`` of the selection, of the assignment, the inputs)."""

    shards: tuple[tuple[str, ...], ...]
    predicted: tuple[float, ...]
    selection: int
    selection_digest: str
    digest: str

    def record(self, shard: Shard, inputs: Mapping[str, object]) -> dict:
        """What one shard job records of the split (phases.json's ``split``, the ledger's ``shard``
        event): its shard, its tests, the selection's size and digest, the split's digest and inputs."""
        mine = self.shards[shard.index]
        return {
            "index": shard.index,
            "count": shard.count,
            "tests": len(mine),
            "predicted_s": round(self.predicted[shard.index], 3),
            "selection": {"tests": self.selection, "digest": self.selection_digest},
            "split": self.digest,
            "inputs": dict(inputs),
            "assigned": list(mine),
        }


def plan(nodeids: Sequence[str], count: int, seconds: Mapping[str, float], groups: Groups) -> Plan:
    """The split of ``nodeids`` into ``count`` shards: units that stay together (``groups.unit``) weighed
    by ``weigh`` and spread by ``assign``; the same whatever the order of ``nodeids``."""
    ordered = list(dict.fromkeys(nodeids))
    units: dict[str, list[str]] = {}
    for nodeid in ordered:
        units.setdefault(groups.unit(nodeid), []).append(nodeid)
    weight = weigh(ordered, seconds)
    # fsum: exactly rounded, so a unit weighs the same whatever order its tests were collected in
    weights = {unit: math.fsum(weight[n] for n in members) for unit, members in units.items()}
    placed = assign(units, count, weights)
    owner = {unit: i for i, found in enumerate(placed) for unit in found}
    shards: list[list[str]] = [[] for _ in range(count)]
    for nodeid in ordered:
        shards[owner[groups.unit(nodeid)]].append(nodeid)
    predicted = [math.fsum(weights[unit] for unit in found) for found in placed]
    if sum(map(len, shards)) != len(ordered) or {n for shard in shards for n in shard} != set(ordered):
        raise RuntimeError("the split lost or doubled a test")  # checked at run time: a bug of ours, exit 4
    assignment = sorted(f"{i}\t{n}" for i, found in enumerate(shards) for n in found)
    return Plan(
        tuple(map(tuple, shards)), tuple(predicted), len(ordered), digest(ordered), digest(assignment)
    )


def digest(nodeids: Iterable[str]) -> str:
    """A set of node ids as 16 hex digits (SHA-256 of them sorted): equal on every job for equal sets."""
    text = "\n".join(sorted(set(nodeids)))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def junit_key(nodeid: str) -> str:
    """How pytest's junitxml names a test (``classname::name``): the path's ``/`` as ``.``, ``.py`` off;
    split as junitxml splits, before the parameters (which may hold ``::`` themselves)."""
    path, bracket, params = nodeid.partition("[")
    parts = path.split("::")
    module = parts[0].replace("/", ".").removesuffix(".py")
    return f"{'.'.join([module, *parts[1:-1]])}::{parts[-1]}{bracket}{params}"


def first_configurations(report: Mapping) -> dict[str, str]:
    """Node id → fingerprint of the first vLLM configuration the test itself started or was handed warm
    (its records and reuses, by start time): the one rule the split's units and the order's groups use.
    Starts made by a wider-scoped fixture are left out (ordering tests cannot move those); a record with
    no usable start or fingerprint is one ``ReportError`` line."""
    owned = []
    for event in [*report.get("records", []), *report.get("reuses", [])]:
        if not isinstance(event, dict) or event.get("kind") != "vllm" or not event.get("test"):
            continue
        if event.get("scope") not in (None, "function"):
            continue
        when, test, key = event.get("start", event.get("t")), event["test"], event.get("fingerprint")
        if isinstance(when, bool) or not isinstance(when, int | float) or not isinstance(key, str):
            raise ReportError(
                f"a runner record of {str(test)[:80]!r} has start {str(when)[:40]!r} "
                f"and fingerprint {str(key)[:40]!r}: expected a time and a text"
            )
        owned.append((float(when), str(test), key))
    first: dict[str, str] = {}
    for _, test, key in sorted(owned, key=lambda entry: entry[0]):
        first.setdefault(test, key)
    return first


class Groups:
    """The engine groups: what a previous run's report.json says about keeping tests together: the package
    folders, files and classes whose wider-scoped fixtures started a runner, and each test's first engine
    configuration. Without a report nothing is known: then a whole file is one unit. The split keeps each
    ``unit`` on one shard and failures first moves each ``block`` whole, both from these groups."""

    def __init__(self, report: dict | None = None):
        self.known = report is not None
        # folders (``""``: the rootdir) a package-scoped fixture's runner held
        self.packages: set[str] = set()
        self.together: dict[str, str] = {}  # a file, or a class's node id -> the unit that holds it
        for record in [*(report or {}).get("records", []), *(report or {}).get("reuses", [])]:
            if not isinstance(record, dict) or not isinstance(record.get("test"), str):
                continue
            test, scope = record["test"], record.get("scope")
            file = test.split("::")[0]
            if scope == "package":
                self.packages.add(file.rpartition("/")[0])
            elif scope == "module":
                self.together.setdefault(file, f"file {file}")
            elif scope == "class" and test.count("::") >= 2:
                owner = test.rsplit("::", 1)[0]
                self.together.setdefault(owner, f"class {owner}")
        self.configuration = first_configurations(report or {})  # node id -> fingerprint

    @classmethod
    def of_packages(cls, folders: Iterable[str]) -> Groups:
        """The groups a phase's order is handed (``HARNESS_ENGINE_GROUPS``): the package folders alone."""
        groups = cls()
        groups.packages = set(folders)
        return groups

    def package(self, file: str) -> str | None:
        """The package group holding ``file``: the outermost of ``packages`` at or above its folder (a
        package-scoped fixture lives until its package's last test, sub-folders included)."""
        parts = file.split("/")[:-1]
        for end in range(len(parts) + 1):
            if (folder := "/".join(parts[:end])) in self.packages:
                return f"package {folder}"
        return None

    def block(self, nodeid: str) -> str:
        """What failures first moves whole: the test's package group, else its file (a module's fixtures
        and every class of it); the order never splits one, and learned timeouts count a block as moved."""
        file = nodeid.split("::")[0]
        return self.package(file) or f"file {file}"

    def unit(self, nodeid: str) -> str:
        """The unit ``nodeid`` is split with: its package, file or class where a wider-scoped fixture
        started a runner, its file and engine configuration, else itself; its file without a report."""
        file = nodeid.split("::")[0]
        if not self.known:
            return f"file {file}"
        owner = nodeid.rsplit("::", 1)[0]
        found = (
            self.package(file)
            or self.together.get(file)
            or (self.together.get(owner) if owner != file else None)
        )
        if found is not None:
            return found
        if nodeid in self.configuration:
            return f"configuration {file} {self.configuration[nodeid]}"
        return f"test {nodeid}"
