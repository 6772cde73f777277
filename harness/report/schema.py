"""report.json's format in types: the report, its phases, tallies and advice (docs/report-format.md).

The records, findings, tests, workers and samples are the ledger's shapes (``harness.ledger.records``),
carried into the report as they are; they are re-exported here so the report's readers import one module.
Every file the harness reads back is checked against these types once, at load (``harness.report.store``,
through ``harness.config.validate.mismatch``): fields, types, and the ranges their ``Annotated`` bounds
give (a count or a byte total is whole and not negative, a time is since the epoch, seconds are finite and
not negative), so nothing past the loader meets a value of another kind.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, Required, TypedDict

from harness.config.validate import Text
from harness.failures import FailureClass
from harness.ledger.records import (
    Count,
    Epoch,
    Finding,
    Record,
    Sample,
    Seconds,
    TestResult,
    Total,
    WorkerInfo,
)

__all__ = [
    "VERSION",
    "ABSENT",
    "Configurations",
    "Durations",
    "Advice",
    "Blocked",
    "Device",
    "FileTally",
    "GpuFree",
    "GpuFreeList",
    "GpuFreeTests",
    "EngineGroups",
    "MergedFrom",
    "Finding",
    "Phase",
    "HistoryRecord",
    "PhaseSelection",
    "PhasesFile",
    "PlatformInfo",
    "Record",
    "Report",
    "Sample",
    "SelectionFile",
    "Starts",
    "Tally",
    "TestResult",
    "WorkerInfo",
]

VERSION: Literal[1] = 1

# Fields of ``Report`` that version 1's first reports (and hand-made ones) may lack: ``load`` fills them
# with these, so a reader meets every field ``Report`` declares.
ABSENT: dict[str, Any] = {
    "shard": None,
    "started": None,
    "devices": [],
    "versions": {},
    "environment": {},
    "findings": [],
    "workers": [],
    "samples": [],
}

Durations = dict[str, Seconds]  # pytest-split's .test_durations: node id -> seconds
Configurations = dict[str, str]  # HARNESS_CONFIGURATIONS: node id -> fingerprint, reuse-sensitive or failed


class Phase(TypedDict, total=False):
    """One phase as ``harness run`` wrote it to ``phases.json``, with its test outcomes in the report."""

    name: Required[Text]
    started: Epoch | None
    wall_s: Seconds | None
    exit_code: int | None
    args: list[str]
    timed_out: bool
    stopped: str | None  # the signal that stopped harness run (SIGTERM...), else null
    attempts: Count  # pytest runs of the phase: more than 1 when resumed after a crash
    selected: Count | None  # the tests it was given after the run's one collection
    outcomes: dict[str, Count]  # the report's addition: outcome -> count
    collected: Count  # the report's addition: tests pytest collected, and those with a result
    reported: Count


class HistoryRecord(TypedDict, total=False):
    """What a run records of its ``--history`` (``harness.report.previous.History.record``): the place it
    was read from and the tests that failed there, or a note saying why there was none."""

    source: Required[str | None]
    failed: list[str]
    note: str


class GpuFreeList(TypedDict):
    """``gpu-free.json`` (``HARNESS_GPU_FREE_TESTS``): the GPU-free tests ``harness run`` hands a phase's
    session, to deselect or to run alone (``harness.pytest_plugin.cpu_job``)."""

    mode: Literal["deselect", "only"]
    source: str | None
    tests: list[str]


class EngineGroups(TypedDict):
    """``engine-groups.json`` (``HARNESS_ENGINE_GROUPS``): the history's package folders whose
    package-scoped fixture started a runner (``harness.split.Groups.packages``); ``""`` is the rootdir."""

    packages: list[str]


class SkippedList(TypedDict):
    """``selection-skipped.json`` (``HARNESS_SELECTED``): the tests ``harness run --changed-since`` leaves
    out (``harness.run.selecting``), which a phase's session skips, or in shadow marks
    (``harness.pytest_plugin.selected``)."""

    mode: Literal["on", "shadow"]
    ref: str
    skipped: list[str]


class FootprintSession(TypedDict, total=False):
    """``footprints/<worker>-<pid>.json``, a session's footprints (``harness.pytest_plugin.footprint``):
    ``[node id, [file...]]`` pairs, ``[node id, [marker...]]`` pairs and ``[token, node id]`` pairs (the
    pairs' shape is ``harness.select.table``'s to check)."""

    tests: Required[list[list[str | list[str]]]]
    markers: list[list[str | list[str]]]
    children: list[list[str]]
    alive: list[list[str]]  # [pid, node id]: a test that ran while that child process was alive


class FootprintChild(TypedDict):
    """``footprints/child-<pid>.json``, a process a test started (``harness.select.profiler``): its test's
    token and the files of the modules it imported."""

    test: str
    files: list[str]


class FootprintBegun(TypedDict):
    """``footprints/begun-<pid>.json``, written when such a process starts: with no ``child-<pid>.json``
    beside it, the process died before it could write (its test's footprint is then unknown)."""

    test: str


class PhaseSelection(TypedDict):
    """One phase as the run's one collection selects it: its paths and its ``-m`` / ``-k``."""

    name: str
    paths: list[str]
    markers: str | None
    keywords: str | None


class SelectionFile(TypedDict, total=False):
    """The run's one collection's files (``harness.run.selection``): the phases, then what the collection
    adds (each phase's node ids; pytest's reading of the run's ``-m``/``-k``, its rootdir, an error)."""

    phases: Required[list[PhaseSelection]]
    members: dict[str, list[str]]
    markers: str
    keywords: str
    rootdir: str
    error: str | None


class PhasesFile(TypedDict, total=False):
    """``phases.json``: what ``harness run`` knows of a run, rewritten after each phase."""

    suite: str | None
    platform: str | None
    platform_reason: str | None
    shard: str | None
    started: Epoch | None
    baseline: str | None  # --baseline: the base branch's report the summary compares with
    split: dict | None  # --shard: the split's index, count, predicted seconds and source
    history: HistoryRecord | None  # --history: its source and the tests that failed there, or why none
    selection: dict[str, Any] | None  # --changed-since: what selection ran and skipped (harness.select)
    phases: Required[list[Phase]]


class PlatformInfo(TypedDict):
    name: str | None
    reason: str | None


class Device(TypedDict):
    """A device the run used; name and total are null when ``harness report`` runs on another machine."""

    index: Count | None
    name: str | None
    uuid: str
    total_bytes: Count | None


class Tally(TypedDict):
    """Runner starts of a group: started, failed (blocked included), start-up seconds, starts by kind, and
    the starts the reuse pool avoided with the seconds they took (absent in reports made before reuse)."""

    starts: Count
    failed: Count
    startup_s: Total
    by_kind: dict[str, Count]
    # net of retries (below zero where the retries cost more than reuse saved): hand-ons less the starts and
    # hand-ons of the tries run again, and those seconds
    reused: NotRequired[int]
    saved_s: NotRequired[float]
    retries: NotRequired[Count]  # tries of a test run again (``reruns``)
    retry_starts: NotRequired[Count]  # the runner starts those tries made


class Rerun(TypedDict):
    """A try of a test after its first (the ledger's ``rerun`` event; one mechanism and one record for every
    retry, whatever its ``policy``): its number (2 the first retry), outcome, phase and failure text; why
    it ran; the runner starts it made and the hand-ons it took, with their seconds; the first try's
    failure (what a run without the retry reports); the test's final ``result``, the try that ``counts``
    and the policy's ``verdict``."""

    t: float
    test: str
    attempt: Count
    outcome: str
    when: str | None
    message: str | None
    longrepr: str | None
    first_outcome: str
    first_message: str | None
    first_longrepr: str | None
    failure_class: FailureClass | None  # each failed try's class (pytest_plugin.classes), where it ran
    first_failure_class: FailureClass | None
    why: str
    policy: str
    starts: Count
    started_s: Total
    reused: Count
    reused_s: Total
    result: str
    counts: Count
    verdict: str | None
    file: str | None
    worker: str | None
    phase: str | None


class Starts(TypedDict):
    total: Tally
    by_kind: dict[str, Tally]
    by_phase: dict[str, Tally]
    by_file: dict[str, Tally]


class FileTally(TypedDict):
    """One test file: its tests, their outcomes, and wall seconds (setup, call and teardown)."""

    tests: Count
    outcomes: dict[str, Count]
    wall_s: Total


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
        "fingerprint": "str | None",
        "phase": "str | None",
        "worker": "str | None",
        "file": "str | None",
        "starts": Count,
        "runners": list[str],
        "tests": "list[str | None]",
        "scope": str,  # "class" | "module"
        "class": "str | None",
        "seconds_saved": Total,
        "blocked": list[Blocked],
        "warning": "str | None",
    },
)


class GpuFree(TypedDict):
    """One test that held a device without using it (``report.gpu_free``)."""

    nodeid: str
    seconds: Total
    devices: Count  # the devices its worker held
    gpu_minutes: Total


class GpuFreeTests(TypedDict):
    """The run's GPU-free tests, longest first, and the GPU-minutes they held together."""

    tests: list[GpuFree]
    gpu_minutes: Total


class MergedFrom(TypedDict):
    """One report a merged one was made of (``harness merge``): its shard (``Shard``'s ``"i/N"``; None
    unsharded), its start and when it was written: with the suite, platform and commit, its build's."""

    shard: str | None
    started: Epoch | None
    generated: Epoch | None


class Report(TypedDict):
    """report.json."""

    version: Literal[1]
    generated: Epoch
    suite: str | None
    shard: str | None
    started: Epoch | None
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
    reruns: NotRequired[list[Rerun]]  # its rerun events: tries of a test run again, and why
    splits: NotRequired[list[dict[str, Any]]]  # its shard events, each with the seconds its tests took
    accounting: NotRequired[dict[str, Any]]  # harness merge's proof of its shards' tests (report.union)
    merged_from: NotRequired[list[MergedFrom]]  # harness merge's: the reports it was made of
    history: NotRequired[HistoryRecord | None]  # phases.json's: the run's history, or why it had none
    selection: NotRequired[dict[str, Any] | None]  # --changed-since: selected, skipped, false greens
    footprints: NotRequired[dict[str, Any]]  # each test's files whose code ran (harness.select.table)
    starts: Starts
    files: dict[str, FileTally]
    advice: NotRequired[list[Advice]]
    gpu_free: NotRequired[GpuFreeTests]  # tests that started no runner and held no device memory
