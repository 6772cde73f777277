"""A previous run, read once per process: the one ``History`` that ``harness run`` (``--history``,
``--durations-from``, pytest-shard's ``--harness-durations``), pytest-shard's split in a plain session and
the CI generators' ``--history`` answer every question from.

It is read by the one loader (``harness.report.store``) and then passed as a value: its durations weigh the
split (``plan``), its engine groups keep tests together (``harness.split.Groups``), its configurations and
failures order the tests (``HARNESS_CONFIGURATIONS``, whose ``failed <fingerprint>`` grammar is written by
``marked`` and read by ``decode`` only), its GPU-free tests move to the CPU job, and its recorded seconds
give each test its learned timeout (``timeouts``), computed with the places the order can give it.

A history given for guidance (``--history``: CI restores what it can) that is missing, unreadable, or of
another suite or platform is one ``note`` and the run goes on without it; a file the user named for
durations is strict (``read``/``durations`` raise one ``ReportError`` line).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness import split
from harness.config.variables import SENSITIVE
from harness.errors import HarnessError, ReportError
from harness.ledger.records import seconds as took
from harness.report.gpu_free import GPU_PLATFORMS
from harness.report.marks import decode, marked
from harness.report.schema import Report
from harness.report.store import load, recorded

KEPT = "gpu-free"  # the GPU-free CPU job's report, kept in the history's folder by the cell's merge step
FACTOR = 1.5  # learned timeouts: recorded seconds x FACTOR + MARGIN_S, at least LEAST_S, at most the bound
MARGIN_S = 60.0
LEAST_S = 60.0


def timeout_s(seconds: float, bound: float) -> float:
    """One test's learned timeout from the seconds its place costs: ``FACTOR`` x seconds + ``MARGIN_S``,
    rounded up, at least ``LEAST_S``, never past ``bound``; a value that is no usable number: ``bound``."""
    if not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
        return float(bound)
    return float(min(bound, max(LEAST_S, math.ceil(min(seconds, 1e9) * FACTOR + MARGIN_S))))


def scope(nodeid: str) -> str:
    """What xdist's ``loadscope`` hands a worker whole, and so what sets a wider fixture up once: a test's
    class, else its file."""
    return nodeid.split("[", 1)[0].rsplit("::", 1)[0]


@dataclass(frozen=True)
class History:
    """One previous run as every consumer sees it (empty: no history; ``note`` says why)."""

    source: str | None = None  # the place it was read from
    kind: str = "none"  # report, junit, test_durations or none
    suite: str | None = None
    platform: str | None = None
    seconds: Mapping[str, float] = field(default_factory=dict)  # node id (or JUnit key) -> seconds
    setup: Mapping[str, float] = field(default_factory=dict)  # node id -> recorded setup seconds
    ran: tuple[str, ...] = ()  # tests that passed or failed there (a skip's 0 s says nothing)
    groups: split.Groups = field(default_factory=split.Groups)
    configurations: Mapping[str, str] = field(default_factory=dict)  # HARNESS_CONFIGURATIONS' content
    gpu_free: tuple[str, ...] = ()  # the tests that can run on the CPU job
    note: str | None = None  # why there is none
    report: Report | None = field(default=None, repr=False, compare=False)  # for what else it may answer

    @property
    def failed(self) -> list[str]:
        """The tests that failed there, sorted."""
        return sorted(t for t, value in self.configurations.items() if decode(value).failed)

    @property
    def described(self) -> str:
        """What the split's record says it was weighed by."""
        return f"{self.kind} {Path(self.source).name}" if self.source else self.kind

    def plan(self, nodeids: Sequence[str], count: int, files: bool = True) -> split.Plan:
        """The split of ``nodeids`` into ``count`` shards weighed by this history's seconds
        (``harness.split.plan``): whole files (``harness run``'s split, which every job of a build and the
        CI generator's timeouts compute alike), or with ``files=False`` this history's engine groups
        (pytest-shard's flags in a plain session)."""
        return split.plan(nodeids, count, self.seconds, split.Groups() if files else self.groups)

    def units(self, files: bool = True) -> str:
        """What ``plan`` kept whole, as a split's record says it."""
        return "history" if not files and self.groups.known else "file"

    def record(self) -> dict:
        """What phases.json records of it: its source and the tests that failed there, or why none."""
        if self.note is not None:
            return {"source": self.source, "note": self.note}
        return {"source": self.source, "failed": self.failed}

    def timeouts(self, bound: float, collected: Iterable[Sequence[str]] | None) -> dict[str, float]:
        """Each recorded test's learned timeout (``timeout_s``) from what its place can cost it: its own
        recorded seconds, plus (where it may be first of its scope in this run) the two largest setups the
        history recorded, which cover a wider fixture's start and a session's. Such a test is one first of
        its scope in a phase's collection (``collected``; None: every test), or one in an engine group that
        failures first moves (``split.Groups.block``, the order's own blocks: the order within it changes)."""
        extra = math.fsum(sorted(self.setup.get(t, 0.0) for t in self.ran)[-2:])
        moved = {self.groups.block(t) for t in self.failed}
        firsts: set[str] | None = None
        if collected is not None:
            firsts = set()
            for phase in collected:
                seen: set[str] = set()
                for nodeid in phase:
                    if scope(nodeid) not in seen:
                        seen.add(scope(nodeid))
                        firsts.add(nodeid)
        found = {}
        for test in self.ran:
            paid = self.seconds.get(test, 0.0)
            if firsts is None or test in firsts or self.groups.block(test) in moved:
                paid += extra
            found[test] = timeout_s(paid, bound)
        return found


def from_report(report: Report, source: str, kind: str = "report") -> History:
    """A loaded report as a ``History`` (its GPU-free tests as its own section lists them)."""
    tests = report["tests"]
    section = report.get("gpu_free")
    marks = configurations(report, source)  # first: a bad record is one line naming the file
    return History(
        source=source,
        kind=kind,
        suite=report.get("suite"),
        platform=report["platform"].get("name"),
        seconds={t["nodeid"]: took(t) for t in tests},
        setup={t["nodeid"]: t.get("setup_s") or 0.0 for t in tests},
        ran=tuple(dict.fromkeys(t["nodeid"] for t in tests if t["outcome"] in ("passed", "failed"))),
        groups=split.Groups(dict(report)),
        configurations=marks,
        gpu_free=tuple(sorted({each["nodeid"] for each in (section["tests"] if section else [])})),
        report=report,
    )


def read(path: str | os.PathLike[str]) -> History:
    """A report (or its run directory) the user named: strict, one ``ReportError`` line when unusable."""
    return from_report(load(Path(path)), str(path))


def durations(path: str | os.PathLike[str]) -> History:
    """A durations file the user named (a report, JUnit XML or pytest-split's ``.test_durations``)."""
    seconds, kind, report = recorded(Path(path))
    if report is not None:
        return from_report(report, str(path), kind)
    return History(source=str(path), kind=kind, seconds=seconds)


def first_usable(places: str | None, suite: str, platforms: Sequence[str], *, what: str) -> History:
    """The first of ``places`` (``:``-separated, as ``HARNESS_HISTORY``: a pull request's own previous
    attempt, then the base branch's last report) that is a report of ``suite`` on one of ``platforms``;
    else an empty ``History`` whose ``note`` says why (``what``: the option that named them)."""
    if not places:
        return History(note=f"no history: none given ({what})")
    why = []
    for place in [part for part in places.split(os.pathsep) if part]:
        try:
            found = read(place)
        except HarnessError as error:
            why.append(str(error))
            continue
        if found.suite != suite or found.platform not in platforms:
            shown = " or ".join(map(repr, platforms))
            why.append(
                f"{place} is of suite {found.suite!r} on {found.platform!r}, this run is {suite!r} on {shown}"
            )
            continue
        return _with_cpu_job(found, Path(place))
    return History(source=places, note=f"no history: {'; '.join(why) or repr(places)}")


def gpu_platforms(platform: str) -> tuple[str, ...]:
    """The platforms a history may be of for a run on ``platform``: its own; the CPU job reads its GPU
    cell's (any GPU platform)."""
    return GPU_PLATFORMS if platform == "cpu" else (platform,)


def _with_cpu_job(found: History, place: Path) -> History:
    """The GPU-free tests with the CPU job's verdict of the same build (``<place>/gpu-free/report.json``):
    those that passed there stay moved, those that failed go back to the GPU steps; a broken copy is
    ignored (the GPU's own judgement stands)."""
    kept = (place if place.is_dir() else place.parent) / KEPT
    if found.platform not in GPU_PLATFORMS or not (kept / "report.json").is_file():
        return found
    try:
        cpu = load(kept)
    except ReportError:
        return found
    tests = set(found.gpu_free)
    if cpu.get("suite") == found.suite:
        tests |= {t["nodeid"] for t in cpu["tests"] if t["outcome"] == "passed"}
        tests -= {t["nodeid"] for t in cpu["tests"] if t["outcome"] in ("failed", "error")}
    return replace(found, gpu_free=tuple(sorted(tests)))


def configurations(report: Report, source: str) -> dict[str, str]:
    """Node id → fingerprint of the first vLLM configuration the test itself started or was handed warm,
    ``reuse-sensitive`` for a test that failed on a handed-on engine and passed on fresh ones, or
    ``failed [<fingerprint>]`` for a test that failed there (``marked``); the configuration by the one
    rule the split's units use too (``harness.split.first_configurations``)."""
    try:
        first = split.first_configurations(report)
    except ReportError as error:
        raise ReportError(f"{source}: {error}") from None
    for finding in report.get("findings", []):  # failed on a handed-on engine: fresh engines next time
        found = finding.get("test")
        if finding.get("type") == SENSITIVE and isinstance(found, str):
            first[found] = SENSITIVE
    for result in report["tests"]:  # failed there: a failure on a handed-on engine is its own
        if result["outcome"] in ("failed", "error"):
            test = result["nodeid"]
            first[test] = marked(decode(first.get(test)).configuration)
    return first
