"""report.json's format in types: the report, its phases, tallies and advice (docs/report-format.md).

The records, findings, tests, workers and samples are the ledger's shapes (``harness.ledger.records``),
carried into the report as they are; they are re-exported here so the report's readers import one module.
``REQUIRED`` is what ``store.load`` checks at run time, where JSON from disk becomes a ``Report``.
"""

from __future__ import annotations

from typing import Any, NotRequired, Required, TypedDict

from harness.ledger.records import Finding, Record, Sample, TestResult, WorkerInfo

__all__ = [
    "VERSION",
    "REQUIRED",
    "Advice",
    "Blocked",
    "Device",
    "FileTally",
    "Finding",
    "Phase",
    "PhasesFile",
    "PlatformInfo",
    "Record",
    "Report",
    "Sample",
    "Starts",
    "Tally",
    "TestResult",
    "WorkerInfo",
]

VERSION = 1

# Fields ``load`` insists on; ``compare`` and ``shards`` read nothing else without a default.
REQUIRED: dict[str, type | tuple[type, ...]] = {
    "suite": (str, type(None)),
    "phases": list,
    "tests": list,
    "records": list,
    "starts": dict,
    "files": dict,
}


class Phase(TypedDict, total=False):
    """One phase as ``harness run`` wrote it to ``phases.json``, with its test outcomes in the report."""

    name: Required[str]
    started: float | None
    wall_s: float | None
    exit_code: int | None
    args: list[str]
    timed_out: bool
    stopped: str | None  # the signal that stopped harness run (SIGTERM...), else null
    attempts: int  # pytest runs of the phase: more than 1 when resumed after a crash
    outcomes: dict[str, int]  # the report's addition: outcome -> count
    collected: int  # the report's addition: tests pytest collected, and those with a result
    reported: int


class PhasesFile(TypedDict, total=False):
    """``phases.json``: what ``harness run`` knows of a run, rewritten after each phase."""

    suite: str | None
    platform: str | None
    platform_reason: str | None
    shard: str | None
    started: float | None
    baseline: str | None  # --baseline: the base branch's report the summary compares with
    split: dict | None  # --shard: the split's index, count, predicted seconds and source
    phases: Required[list[Phase]]


class PlatformInfo(TypedDict):
    name: str | None
    reason: str | None


class Device(TypedDict):
    """A device the run used; name and total are null when ``harness report`` runs on another machine."""

    index: int | None
    name: str | None
    uuid: str
    total_bytes: int | None


class Tally(TypedDict):
    """Runner starts of a group: started, failed (blocked included), start-up seconds, starts by kind, and
    the starts the reuse pool avoided with the seconds they took (absent in reports made before reuse)."""

    starts: int
    failed: int
    startup_s: float
    by_kind: dict[str, int]
    reused: NotRequired[int]
    saved_s: NotRequired[float]


class Starts(TypedDict):
    total: Tally
    by_kind: dict[str, Tally]
    by_phase: dict[str, Tally]
    by_file: dict[str, Tally]


class FileTally(TypedDict):
    """One test file: its tests, their outcomes, and wall seconds (setup, call and teardown)."""

    tests: int
    outcomes: dict[str, int]
    wall_s: float


class Blocked(TypedDict):
    test: str | None
    kind: str
    model: str


# "class" is a keyword: the functional form
Advice = TypedDict(
    "Advice",
    {
        "kind": str,
        "model": str,
        "fingerprint": str,
        "phase": "str | None",
        "worker": str,
        "file": "str | None",
        "starts": int,
        "runners": list[str],
        "tests": "list[str | None]",
        "scope": str,  # "class" | "module"
        "class": "str | None",
        "seconds_saved": float,
        "blocked": list[Blocked],
        "warning": "str | None",
    },
)


class Report(TypedDict):
    """report.json."""

    version: int
    generated: float
    suite: str | None
    shard: str | None
    started: float | None
    platform: PlatformInfo
    devices: list[Device]
    versions: dict[str, Any]
    environment: dict[str, str]
    phases: list[Phase]
    tests: list[TestResult]
    records: list[Record]
    findings: list[Finding]
    workers: list[WorkerInfo]
    samples: list[Sample]
    reuses: NotRequired[list[dict[str, Any]]]  # the ledger's runner-reused events
    reuse_refusals: NotRequired[list[dict[str, Any]]]  # its reuse-refused events
    splits: NotRequired[list[dict[str, Any]]]  # its shard events, each with the seconds its tests took
    starts: Starts
    files: dict[str, FileTally]
    advice: NotRequired[list[Advice]]
