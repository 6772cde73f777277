"""Before a runner starts: can its device(s) give it the memory it needs while live holders keep theirs?

Holders are live runners (with the fraction of the device they declared, as vLLM's
``gpu_memory_utilization``) and live fixtures whose setup grew device memory. When holders explain the
shortage, waiting cannot help (they live until their fixture scope ends, in this very process), so the
start fails naming each holder and what would free it: at once when fixtures own every holder (a fixture's
value lives until its scope ends, which cannot come while this start waits), else after ``block_grace_s``
for holders that could still be collected. A shortage no holder explains is someone else's memory: that
waits by the platform policy (``harness.memory.wait_for_memory``).

Declared fractions matter because measured memory can hide the conflict: vLLM's CPU engine reserves its
KV cache without touching it, so two engines whose fractions add past 1.0 both start on a laptop, while on
a GPU the second waits 240 s for memory that never frees. So by default (``overlap = "block"``) declared
shares must fit, and the bug is caught on every platform and with every model. They can also overstate:
an encoder-only engine (no KV cache) uses a small part of what it declares, and plain vLLM starts a second
engine beside it (docs/validation.md); ``overlap = "warn"`` makes that a finding and lets the start go on
when the measured memory fits.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from harness.errors import RunnerBlocked
from harness.ledger.owner import Owner
from harness.platform import allocator
from harness.platform.base import GIB


@dataclass(eq=False)  # one holder is one live object: identity, not its fields
class Holder:
    """Something alive in this process that keeps device memory: a runner or a fixture value.

    What it declared and what it uses are kept apart: an encoder-only vLLM engine uses a small part of its
    declared share, a decoder uses its whole share. Declared shares decide under
    ``overlap = "block"``; measured bytes decide whether a start fits the device.
    """

    key: object
    label: str  # "vllm runner `model`" / "fixture `name`"
    owner: Owner
    devices: tuple[int, ...]  # visible device indices
    used_bytes: dict[int, int] = field(default_factory=dict)  # per device, measured at its start
    fraction: float | None = None  # declared share of each device (vLLM's gpu_memory_utilization)
    declared_bytes: int | None = None  # that share in bytes, per device

    def describe(self) -> str:
        started = f"started in {self.owner.test}" if self.owner.test else "started outside any test"
        per_device = " per device" if len(self.devices) > 1 else ""
        declared = (
            f"declares {self.fraction:g} = {self.declared_bytes / GIB:.2f} GiB{per_device}; "
            if self.fraction is not None and self.declared_bytes is not None
            else ""
        )
        used = " + ".join(f"{max(0, b) / GIB:.2f}" for b in self.used_bytes.values()) or "0.00"
        return f"{self.label} ({declared}uses {used} GiB, {started}): {self.owner.lifetime()}"

    def pinned(self) -> bool:
        """Whether a fixture owns it: it lives until the fixture's scope ends, not while a start waits."""
        return self.owner.fixture is not None


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


class Need(NamedTuple):
    """What a runner asks for: bytes per device and, for vLLM, the declared fraction behind them."""

    devices: tuple[int, ...]
    bytes: int | None  # per device; None when unknown (an HF load)
    fraction: float | None = None


def _declared_conflict(need: Need, live: list[Holder]) -> tuple[str, list[Holder]] | None:
    """(what is over-declared, the declaring holders) when, on one of the runner's devices, the shares
    declared there with this one pass 1.0. Device by device: a tensor-parallel engine declares its
    fraction of each of its devices, and two one-device engines on GPUs 0 and 1 leave it room on both."""
    if need.fraction is None:
        return None
    for index in need.devices:
        declaring = [h for h in live if h.fraction is not None and index in h.devices]
        declared = sum(h.fraction or 0.0 for h in declaring)
        if declaring and declared + need.fraction > 1.0:
            return (
                f"on device {index} live runners declared {declared:g} and this one asks for "
                f"{need.fraction:g} (together {declared + need.fraction:g} > 1)",
                declaring,
            )
    return None


def _measured_conflict(need: Need, memory: dict, live: list[Holder]) -> tuple[str, list[Holder]] | None:
    """(what is short, the holders whose measured use explains it) or None when the runner fits.

    An empty holder list means the shortage is not explained by anything this process keeps alive.
    """
    if need.bytes is None:
        return None
    for index in need.devices:
        reading = memory[index]
        if reading.free_bytes >= need.bytes:
            continue
        here = [h for h in live if h.used_bytes.get(index, 0) > 0]
        held = sum(h.used_bytes[index] for h in here)
        short = (
            f"device {index} has {reading.free_bytes / GIB:.2f} GiB free of {reading.total_bytes / GIB:.2f} "
            f"GiB and this runner needs {need.bytes / GIB:.2f} GiB"
        )
        return short, here if reading.free_bytes + held >= need.bytes else []
    return None


def _names(explaining: list[Holder]) -> str:
    return "; ".join(h.describe() for h in explaining)


def admit(
    label: str,
    need: Need,
    *,
    holders: Holders,
    memory: Callable[[], dict],
    grace_s: float,
    wait: Callable[[Need], None],
    overlap: str = "block",
    warn: Callable[[str], None] = lambda message: None,
    poll_s: float = 0.1,
) -> None:
    """Return when ``need`` fits; raise ``RunnerBlocked`` naming the holders when they explain why not.

    ``memory`` reads the platform (visible index -> MemoryReading); ``wait`` is the platform-policy wait
    for a shortage no holder explains. One garbage collection runs the finalizers of dropped runners and
    empties the allocator's cache first. Then, when fixtures own every holder that explains the shortage,
    the start is blocked at once; otherwise the check repeats for ``grace_s`` while they may still go.
    Declared shares that only such holders explain block without the collection, which frees neither them
    nor their shares (and takes about half a second where vLLM and torch are loaded).
    Declared shares past the device block under ``overlap="block"``; under ``"warn"`` they are passed to
    ``warn`` once and the start goes on when the measured memory fits.
    """
    __tracebackhide__ = True
    deadline = time.monotonic() + grace_s
    collected = warned = False
    while True:
        live = holders.on(need.devices)
        declared = None if warned else _declared_conflict(need, live)
        found = declared or _measured_conflict(need, memory(), live)
        if found is None:
            return
        short, explaining = found
        # a share declared by runners that fixtures keep (their scope is open) outlasts any collection
        settled = declared is not None and all(h.pinned() for h in explaining)
        if not collected and not settled:
            # dropped runners' finalizers and torch's cached blocks give memory back: look again first
            gc.collect()
            allocator.empty_cache()
            collected = True
            continue
        if declared is not None and overlap == "warn":
            warn(f'{label} starts although {short} (overlap = "warn"); held by {_names(explaining)}')
            warned = True
            continue
        if not explaining:
            wait(need)
            return
        if all(h.pinned() for h in explaining) or time.monotonic() >= deadline:
            raise RunnerBlocked(f"{label} cannot start: {short}; held by {_names(explaining)}")
        time.sleep(poll_s)
