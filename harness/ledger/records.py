"""The shapes the reader merges the ledger's events into, for the reader's and the report's types.

Only what reads a ledger imports them: a ``TypedDict`` resolves every field's annotation when it is
defined, which cost each pytest session ~10 M instructions while it only writes (the owner it stamps on
events is ``harness.ledger.owner``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, Required, TypedDict

from harness.config.validate import Bounds
from harness.failures import FailureClass
from harness.ledger.check import LATEST, LONGEST

# The ranges a read-back file's numbers keep (harness.report.store checks them from these hints): a time
# since the epoch, one test's or runner's seconds, a sum of seconds, a count or bytes (whole, not negative).
Epoch = Annotated[float, Bounds(0, LATEST)]
Seconds = Annotated[float, Bounds(0, LONGEST)]
Total = Annotated[float, Bounds(0, 1e15)]  # a sum of seconds: any sum of them stays finite
Count = Annotated[int, Bounds(0)]
Bytes = dict[str, Count]  # by device UUID


# What the reader makes of the ledger's events (docs/architecture.md, "Ledger events"); report.json carries
# them as they are, so harness.report.schema builds the report's types on these.
class Record(TypedDict):
    """One runner from its ``runner-start`` to its stop: the start's fields, then what became of it."""

    id: str
    kind: str  # "vllm" | "hf"
    model: str
    fingerprint: str | None  # None: a line that left it out (the reader fills every start field)
    config: dict[str, Any] | None
    test: str | None
    file: str | None
    fixture: str | None
    scope: str | None
    worker: str | None
    phase: str | None
    devices: list[str]  # device UUIDs, ["cpu"] on the CPU
    need_bytes: Count | None
    fraction: NotRequired[Annotated[float, Bounds(0, 1, above=True)] | None]  # its declared share of a device
    mem_before: Bytes | None
    start: Epoch
    startup_s: Seconds | None
    stop: Epoch | None
    teardown_s: Seconds | None
    mem_after_start: Bytes | None
    held_after_start: NotRequired[
        Bytes | None
    ]  # what the runner itself holds (torch reserved, engine processes)
    compile: NotRequired[
        Literal["warm", "cold"] | None
    ]  # a vLLM start's compile caches (tracking.compile_cache)
    mem_after_stop: Bytes | None
    outcome: str  # "started" | "failed" | "blocked" | "never-stopped"
    error: str | None
    holders: list[str]


class Finding(TypedDict, total=False):
    """Something a run should not have done; ``runner``, ``test`` and ``phase`` where they apply."""

    type: Required[str]  # live-runner-overlap, memory-not-released, never-stopped, timeout, crash, ...
    message: Required[str]
    t: Epoch  # absent from the reader's own bad-ledger-line findings
    runner: str | None
    test: str | None
    phase: str | None
    worker: str | None
    tests: list[str]  # unaccounted: the collected tests without a result


class TestResult(TypedDict):
    """One test's ``test`` event, with the session's ``worker``, ``device`` and ``phase`` (its process's
    ``worker`` event holds them once) and ``file`` (the node id's) filled in by the reader."""

    t: Epoch
    nodeid: str
    file: str
    outcome: Literal["passed", "failed", "skipped", "error"]
    setup_s: NotRequired[Seconds | None]
    call_s: NotRequired[Seconds | None]
    teardown_s: NotRequired[Seconds | None]
    worker: str | None
    device: str | None
    phase: str | None
    crash: NotRequired[str]  # how its process died under it: "worker gw0 killed by SIGKILL while running ..."
    device_bytes: NotRequired[Count]  # torch's peak on its process's devices during it; absent: no context
    failure_class: NotRequired[FailureClass]  # why a failed or errored test failed (harness.failures)


def seconds(test: TestResult) -> float:
    """A test's seconds, the one rule every output uses (report, JUnit, durations, history, GPU-free,
    near-timeout): setup, call and teardown together, what pytest-timeout times; a phase it never reached
    (null) is 0."""
    return (test.get("setup_s") or 0.0) + (test.get("call_s") or 0.0) + (test.get("teardown_s") or 0.0)


class WorkerInfo(TypedDict):
    """A ``worker`` event: which devices a pytest process was given."""

    t: Epoch
    worker: str
    devices: NotRequired[list[str]]
    mask: NotRequired[str | None]
    pid: NotRequired[Count | None]
    phase: NotRequired[str | None]
    timeout: NotRequired[Seconds | None]  # pytest-timeout's, to tell its thread method's kill apart
    timeout_method: NotRequired[str]


class Sample(TypedDict):
    """A ``memory`` event of the background sampler."""

    t: Epoch
    used: Bytes
