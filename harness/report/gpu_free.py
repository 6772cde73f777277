"""The tests that did not need their GPU: no runner of their worker was alive while they ran and their
process held no device memory of its own then, yet each held a GPU agent's device for its seconds.

vLLM's CI runs such tests on GPU agents by the hundred (vllm-omni counted ~174 MI300-minutes a build);
naming them, with the GPU-minutes they occupied, is the evidence a maintainer needs to move them to a CPU
job (``[tool.harness.ci] gpu_free_job``). A test is judged by what the ledger saw: a runner it or a fixture
started, alive during any of its seconds in the same worker and phase, or device memory its process held
(``device_bytes`` of its test event), makes it a GPU test. On the CPU platform nothing is a GPU test.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.ledger.records import seconds
from harness.platform import GPU_PLATFORMS  # its importers take it from here too
from harness.report.schema import GpuFree, GpuFreeTests, Record, TestResult, WorkerInfo


def _span(test: TestResult) -> tuple[float, float]:
    """The test's seconds, from its end (its event's time) back by its phases' durations."""
    took = seconds(test)
    return test["t"] - took, test["t"]


def _live(records: Iterable[Record], worker: str | None, phase: str | None, start: float, end: float) -> bool:
    return any(
        record["worker"] == worker
        and record["phase"] == phase
        and record["start"] < end
        and (record["stop"] is None or record["stop"] > start)
        for record in records
    )


def gpu_free(
    platform: str | None, tests: list[TestResult], records: list[Record], devices: dict[str, int]
) -> list[GpuFree]:
    """The run's GPU-free tests, longest first. ``devices``: how many devices each worker held."""
    if platform not in GPU_PLATFORMS:
        return []
    found = []
    for test in tests:
        if test["outcome"] == "skipped" or test.get("device_bytes"):
            continue
        start, end = _span(test)
        if _live(records, test["worker"], test["phase"], start, end):
            continue
        held = devices.get(test["worker"] or "", 1)
        seconds = end - start
        found.append(
            GpuFree(
                nodeid=test["nodeid"],
                seconds=round(seconds, 3),
                devices=held,
                gpu_minutes=seconds * held / 60,
            )
        )
    return sorted(found, key=lambda each: (-each["gpu_minutes"], each["nodeid"]))


def total_minutes(found: Iterable[GpuFree]) -> float:
    return round(sum(each["gpu_minutes"] for each in found), 2)


def section(
    platform: str | None, tests: list[TestResult], records: list[Record], workers: list[WorkerInfo]
) -> GpuFreeTests:
    """report.json's ``gpu_free``: the tests and their GPU-minutes together; each worker holds the devices
    its ``worker`` event lists (at least one)."""
    devices = {w["worker"]: max(1, len(w.get("devices") or [])) for w in workers}
    found = gpu_free(platform, tests, records, devices)
    return GpuFreeTests(tests=found, gpu_minutes=total_minutes(found))


def joined(sections: list[GpuFreeTests]) -> GpuFreeTests:
    """Several shards' sections as one (each judged in its own job: runners of another job's worker of the
    same name ran elsewhere)."""
    found = sorted(
        (each for part in sections for each in part["tests"]),
        key=lambda each: (-each["gpu_minutes"], each["nodeid"]),
    )
    return GpuFreeTests(tests=found, gpu_minutes=total_minutes(found))
