"""Memory policies over a platform: wait until devices hold at most a threshold, and settle after a stop.

Both poll ``platform.memory()`` (bytes, all devices in one pass) with an injectable clock and sleep, so
tests run the real loop without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import cast

from harness.errors import MemoryTimeout, PlatformError
from harness.platform.base import GIB, MemoryReading, Platform


def _gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def _require_visible(devices: list[int], readings: Mapping[int, MemoryReading]) -> None:
    missing = [index for index in devices if index not in readings]
    if missing:
        raise PlatformError(f"devices {missing} are not visible here (visible: {sorted(readings)})")


def wait_for_memory(
    platform: Platform,
    devices: Iterable[int],
    *,
    threshold_bytes: int | None = None,
    threshold_ratio: float | None = None,
    per_device: Mapping[int, float] | None = None,
    timeout_s: float,
    poll_s: float = 1.0,
    stable_s: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Seconds waited until every listed device (visible index) used ≤ its threshold for ``stable_s``.

    Give exactly one threshold: bytes for all, a ratio of each device's total, or bytes per device.
    The time-out names every device with used/total and threshold, the shape of vLLM's
    ``Memory of devices devices=[0] not free after dur_s=240.14`` with the figures that explain it.
    """
    devices = list(devices)
    limit = _limits(devices, threshold_bytes, threshold_ratio, per_device)
    start = clock()
    under_since = None
    while True:
        readings = platform.memory()
        now = clock()
        _require_visible(devices, readings)
        if all(readings[i].used_bytes <= limit(i, readings[i]) for i in devices):
            under_since = now if under_since is None else under_since
            if now - under_since >= stable_s:
                return now - start
        else:
            under_since = None
        if now - start >= timeout_s:
            figures = ", ".join(
                f"device {i} used {_gib(readings[i].used_bytes)} of {_gib(readings[i].total_bytes)}"
                f" (threshold {_gib(limit(i, readings[i]))})"
                for i in devices
            )
            stable = f" for {stable_s:g} s" if stable_s else ""
            waited = f"after {now - start:.2f} s"
            raise MemoryTimeout(
                f"memory of devices {devices} not under threshold{stable} {waited}: {figures}"
            )
        sleep(poll_s)


def _limits(
    devices: list[int],
    threshold_bytes: int | None,
    threshold_ratio: float | None,
    per_device: Mapping[int, float] | None,
) -> Callable[[int, MemoryReading], float]:
    """A device's threshold in bytes, from exactly one of the three ways to give it."""
    if sum(given is not None for given in (threshold_bytes, threshold_ratio, per_device)) != 1:
        raise ValueError("give exactly one of threshold_bytes, threshold_ratio, per_device")
    if per_device is not None and set(devices) - set(per_device):
        raise ValueError(f"per_device has no threshold for devices {sorted(set(devices) - set(per_device))}")

    def limit(index: int, reading: MemoryReading) -> float:
        if per_device is not None:
            return per_device[index]
        if threshold_bytes is not None:
            return threshold_bytes
        return cast(float, threshold_ratio) * reading.total_bytes  # exactly one threshold was given

    return limit


def settle(
    platform: Platform,
    settings,
    devices: Iterable[int] | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """After a runner stops: wait until used ≤ max(ratio × total, floor), stable, on every device.

    A no-op returning 0.0 unless ``settings.settle`` (the ROCm default): there the driver frees VRAM
    lazily and keeps some memory resident, hence the floor; on CUDA release is immediate (docs/memory.md).
    """
    if not settings.settle:
        return 0.0
    readings = platform.memory()
    devices = sorted(readings) if devices is None else list(devices)
    _require_visible(devices, readings)
    floor = settings.settle_floor_gib * GIB
    return wait_for_memory(
        platform,
        devices,
        per_device={i: max(settings.settle_ratio * readings[i].total_bytes, floor) for i in devices},
        timeout_s=settings.settle_timeout_s,
        poll_s=settings.settle_poll_s,
        stable_s=settings.settle_stable_s,
        clock=clock,
        sleep=sleep,
    )
