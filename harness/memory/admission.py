"""Before a runner starts: can its device(s) give it the memory it needs while live holders keep theirs?

Holders are live runners (with the fraction of the device they declared, as vLLM's
``gpu_memory_utilization``) and live fixtures whose setup grew device memory. When holders explain the
shortage, waiting cannot help (they live until their fixture scope ends, in this very process), so the
start fails within ``block_grace_s`` naming each holder and what would free it. A shortage no holder
explains is someone else's memory: that waits by the platform policy (``harness.memory.wait_for_memory``).

Declared fractions matter because measured memory can hide the conflict: vLLM's CPU engine reserves its
KV cache without touching it, so two engines whose fractions add past 1.0 both start on a laptop, while on
a GPU the second waits 240 s for memory that never frees.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from harness.errors import RunnerBlocked
from harness.ledger.records import Owner
from harness.platform import allocator
from harness.platform.base import GIB


@dataclass
class Holder:
    """Something alive in this process that keeps device memory: a runner or a fixture value."""

    key: object
    label: str  # "vllm runner `model`" / "fixture `name`"
    owner: Owner
    devices: tuple[int, ...]  # visible device indices
    held_bytes: dict[int, int] = field(default_factory=dict)  # per device: declared or measured
    fraction: float | None = None  # declared share of each device (vLLM's gpu_memory_utilization)

    def describe(self) -> str:
        started = f"started in {self.owner.test}" if self.owner.test else "started outside any test"
        fraction = f", {self.fraction:g} of the device" if self.fraction is not None else ""
        held = sum(self.held_bytes.values()) / GIB
        return f"{self.label} ({held:.2f} GiB{fraction}, {started}): {self.owner.lifetime()}"


class Holders:
    """The live holders of one process. Finalizers of collected runners release from whatever thread
    collects them, hence the lock."""

    def __init__(self) -> None:
        self._live: dict[object, Holder] = {}
        self._lock = threading.Lock()

    def hold(self, holder: Holder) -> None:
        with self._lock:
            self._live[holder.key] = holder

    def release(self, key: object) -> Holder | None:
        with self._lock:
            return self._live.pop(key, None)

    def on(self, devices: Iterable[int] | None = None) -> list[Holder]:
        """Live holders, in the order they started, on any of ``devices`` (all when None)."""
        wanted = None if devices is None else set(devices)
        with self._lock:
            return [h for h in self._live.values() if wanted is None or wanted & set(h.devices)]


@dataclass(frozen=True)
class Need:
    """What a runner asks for: bytes per device and, for vLLM, the declared fraction behind them."""

    devices: tuple[int, ...]
    bytes: int | None  # per device; None when unknown (an HF load)
    fraction: float | None = None


def _conflict(need: Need, memory: dict, live: list[Holder]) -> tuple[str, list[Holder]] | None:
    """(what is short, the holders that explain it) or None when the runner fits.

    An empty holder list means the shortage is not explained by anything this process keeps alive.
    """
    if need.fraction is not None:
        declaring = [h for h in live if h.fraction is not None]
        declared = sum(h.fraction or 0.0 for h in declaring)
        if declaring and declared + need.fraction > 1.0:
            return (
                f"live runners declared {declared:g} of the device and this one asks for "
                f"{need.fraction:g} (together {declared + need.fraction:g} > 1)",
                declaring,
            )
    if need.bytes is None:
        return None
    for index in need.devices:
        reading = memory[index]
        if reading.free_bytes >= need.bytes:
            continue
        here = [h for h in live if h.held_bytes.get(index, 0) > 0]
        held = sum(h.held_bytes[index] for h in here)
        short = (
            f"device {index} has {reading.free_bytes / GIB:.2f} GiB free of {reading.total_bytes / GIB:.2f} "
            f"GiB and this runner needs {need.bytes / GIB:.2f} GiB"
        )
        return short, here if reading.free_bytes + held >= need.bytes else []
    return None


def admit(
    label: str,
    need: Need,
    *,
    holders: Holders,
    memory: Callable[[], dict],
    grace_s: float,
    wait: Callable[[Need], None],
    poll_s: float = 0.1,
) -> None:
    """Return when ``need`` fits; raise ``RunnerBlocked`` naming the holders when they explain why not.

    ``memory`` reads the platform (visible index -> MemoryReading); ``wait`` is the platform-policy wait
    for a shortage no holder explains. Within ``grace_s`` holders may still go (a garbage collection runs
    the finalizers of dropped runners), so the check repeats until then.
    """
    __tracebackhide__ = True
    deadline = time.monotonic() + grace_s
    collected = False
    while True:
        found = _conflict(need, memory(), holders.on(need.devices))
        if found is None:
            return
        short, explaining = found
        if not collected:
            # dropped runners' finalizers and torch's cached blocks give memory back: look again first
            gc.collect()
            allocator.empty_cache()
            collected = True
            continue
        if not explaining:
            wait(need)
            return
        if time.monotonic() >= deadline:
            names = "; ".join(h.describe() for h in explaining)
            raise RunnerBlocked(f"{label} cannot start: {short}; held by {names}")
        time.sleep(poll_s)
