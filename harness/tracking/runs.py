"""One tracked runner from its start to its stop (``Run``): what it holds on each device, its stop recorded
once, and the check after a test that a stopped runner's memory came back (``check_released``)."""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from typing import Any

from harness.ledger.writer import LedgerWriter
from harness.memory import admission
from harness.platform import allocator
from harness.platform.base import GIB
from harness.tracking.context import current


def _device_keys(devices: tuple[int, ...]) -> dict[int, str]:
    known = {d.index: d.uuid for d in current().platform.devices()}
    return {i: known.get(i, str(i)) for i in devices}


def _used(keys: dict[int, str]) -> dict[str, int]:
    readings = current().platform.memory()
    return {uuid: readings[i].used_bytes for i, uuid in keys.items() if i in readings}


def _children() -> set[int]:
    """This process's descendants: a vLLM engine core (and its workers) are started as children."""
    import psutil  # only where a runner starts: most sessions never pay its import

    return {child.pid for child in psutil.Process().children(recursive=True)}


class Run:
    """One tracked runner from its start to its stop.

    A runner is charged only with memory it holds: torch's reserved bytes in this process above their
    level at the start (an HF model), plus what the processes that appeared during its start use (a vLLM
    engine core), per process as NVML or amdsmi count it. The growth of this process's CUDA context
    (created at the first CUDA call, grown by library handles and kernels loaded on first use) is in
    neither: on the H200 it read as "not released" after clean HF stops (docs/memory.md).
    """

    def __init__(self, writer: LedgerWriter, kind: str, model: str, devices: tuple[int, ...], need, declared):
        self.writer, self.kind, self.model, self.devices, self.need = writer, kind, model, devices, need
        self.declared = declared  # bytes per device the runner declares, or None
        self.id = writer.new_id()
        self.owner = current().owner.current()
        self.keys = _device_keys(devices)
        self.mem_before = _used(self.keys)
        self.reserved_before = {i: allocator.reserved(i) for i in devices}
        self.children_before = _children()
        self.pids: set[int] = set()  # its engine processes, known once it has started
        self.stopped = False
        self.startup_s: float | None = None
        self.compile: str | None = None  # a vLLM start's compile caches: "warm", "cold" or None

    def label(self) -> str:
        return f"{self.kind} runner `{self.model}`"

    def held(self) -> dict[int, int]:
        """Bytes per visible device that this runner holds now (see the class)."""
        engines = current().platform.process_memory(self.pids) if self.pids else {}
        return {i: allocator.reserved(i) - self.reserved_before[i] + engines.get(i, 0) for i in self.devices}

    def started(self, startup_s: float) -> None:
        self.startup_s = round(startup_s, 3)
        context = current()
        context.starts, context.started_s = context.starts + 1, context.started_s + self.startup_s
        self.pids = _children() - self.children_before
        held = self.held()
        compiled: dict[str, Any] = {"compile": self.compile} if self.kind == "vllm" else {}
        self.writer.write(
            "runner-started",
            id=self.id,
            startup_s=round(startup_s, 3),
            mem_after_start=_used(self.keys),
            held_after_start={self.keys[i]: b for i, b in held.items()},
            **compiled,
        )
        current().holders.hold(
            admission.Holder(
                key=self.id,
                label=self.label(),
                owner=self.owner,
                devices=self.devices,
                used_bytes={i: max(0, b) for i, b in held.items()},
                fraction=self.need.fraction,
                declared_bytes=self.declared,
            )
        )

    def stop(self, began: float | None = None) -> None:
        """Record the stop once (explicit close, shutdown, or collection of the runner object).

        ``began`` is the ``time.monotonic()`` at which the runner's own teardown started, if it had one.
        """
        context = current()
        if self.stopped or context.writer is not self.writer:
            return
        self.stopped = True
        began = time.monotonic() if began is None else began
        context.holders.release(self.id)
        after = _used(self.keys)
        self.writer.write(
            "runner-stopped", id=self.id, teardown_s=round(time.monotonic() - began, 3), mem_after_stop=after
        )
        context.stopped(self)

    def stopping(self, stop: Callable[..., Any]) -> Callable[..., Any]:
        """``stop`` (a runner's own shutdown) that records this run's stop, timed from its call, however
        it ends."""

        def recorded(*args, **kwargs):
            began = time.monotonic()
            try:
                return stop(*args, **kwargs)
            finally:
                self.stop(began)

        return recorded

    def kept(self) -> dict[str, int]:
        """Bytes per device (by UUID) the runner still holds."""
        return {self.keys[i]: b for i, b in self.held().items()}

    def watch(self, obj: Any) -> None:
        """Record the stop when ``obj`` is collected; a runner alive at exit stays ``never-stopped``."""
        weakref.finalize(obj, self.stop).atexit = False


RELEASE_WAIT_S = 2.0


def check_released(wait_s: float = RELEASE_WAIT_S, poll_s: float = 0.1) -> None:
    """A "memory-not-released" finding for each stopped runner whose memory did not come back.

    Checked after the test (or fixture teardown) that stopped the runner, not at the stop itself: a runner's
    own teardown goes on after its engine or model is gone (garbage collection, emptying torch's caching
    allocator, the engine process being reaped), and memory needs those to come back. torch's cached but
    unreferenced blocks are given back first, so only memory something still references counts.
    """
    context = current()
    runs = context.take_stopped()
    if not runs:
        return
    allocator.empty_cache()
    tolerance = context.settings.release_tolerance_gib * GIB
    deadline = time.monotonic() + wait_s
    while any(kept > tolerance for run in runs for kept in run.kept().values()):
        if time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    writer = context.writer  # None, or another one: the session that stopped them has ended
    for run in runs:
        for uuid, kept in run.kept().items():
            if writer is not None and kept > tolerance and run.writer is writer:
                writer.write(
                    "finding",
                    type="memory-not-released",
                    runner=run.id,
                    test=run.owner.test,
                    message=f"{run.label()} from {run.owner.test} left {kept / GIB:.2f} GiB on {uuid} "
                    f"after its stop (tolerance {context.settings.release_tolerance_gib:g} GiB)",
                )
