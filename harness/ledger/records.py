"""The shapes the reader merges the ledger's events into, for the reader's and the report's types.

Only what reads a ledger imports them: a ``TypedDict`` resolves every field's annotation when it is
defined, which cost each pytest session ~10 M instructions while it only writes (the owner it stamps on
events is ``harness.ledger.owner``)."""

from __future__ import annotations

from typing import Any, NotRequired, Required, TypedDict


# What the reader makes of the ledger's events (docs/architecture.md, "Ledger events"); report.json carries
# them as they are, so harness.report.schema builds the report's types on these.
class Record(TypedDict):
    """One runner from its ``runner-start`` to its stop: the start's fields, then what became of it."""

    id: str
    kind: str  # "vllm" | "hf"
    model: str
    fingerprint: str
    config: dict[str, Any]
    test: str | None
    file: str | None
    fixture: str | None
    scope: str | None
    worker: str
    phase: str | None
    devices: list[str]  # device UUIDs, ["cpu"] on the CPU
    need_bytes: int | None
    fraction: NotRequired[float | None]  # the share of each device it declared
    mem_before: dict[str, int]
    start: float
    startup_s: float | None
    stop: float | None
    teardown_s: float | None
    mem_after_start: dict[str, int] | None
    held_after_start: dict[str, int] | None  # what the runner itself holds (torch reserved, engine processes)
    mem_after_stop: dict[str, int] | None
    outcome: str  # "started" | "failed" | "blocked" | "never-stopped"
    error: str | None
    holders: list[str]


class Finding(TypedDict, total=False):
    """Something a run should not have done; ``runner``, ``test`` and ``phase`` where they apply."""

    type: Required[str]  # live-runner-overlap, memory-not-released, never-stopped, timeout, crash, ...
    message: Required[str]
    t: float
    runner: str
    test: str | None
    phase: str | None
    worker: str
    tests: list[str]  # unaccounted: the collected tests without a result


class TestResult(TypedDict):
    """One test's ``test`` event, with the session's ``worker``, ``device`` and ``phase`` (its process's
    ``worker`` event holds them once) and ``file`` (the node id's) filled in by the reader."""

    t: float
    nodeid: str
    file: str
    outcome: str  # "passed" | "failed" | "skipped" | "error"
    setup_s: float | None
    call_s: float | None
    teardown_s: float | None
    worker: str
    device: str | None
    phase: str | None
    crash: NotRequired[str]  # how its process died under it: "worker gw0 killed by SIGKILL while running ..."


class WorkerInfo(TypedDict):
    """A ``worker`` event: which devices a pytest process was given."""

    t: float
    worker: str
    devices: list[str]
    mask: str | None
    pid: int
    phase: str | None
    timeout: NotRequired[float | None]  # pytest-timeout's, to tell its thread method's kill apart
    timeout_method: NotRequired[str]


class Sample(TypedDict):
    """A ``memory`` event of the background sampler."""

    t: float
    used: dict[str, int]
