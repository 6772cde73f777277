"""Intel GPUs (vLLM's ``xpu`` platform) through torch's XPU API: identity once, memory in bytes per poll.

Intel has no management library every XPU image carries (XPU Manager is a separate daemon); torch's
``torch.xpu`` is there wherever vLLM runs on XPU, and ``mem_get_info`` gives the device's free and total
bytes across all processes, as ``cudaMemGetInfo`` does. Unlike NVML and amdsmi, torch enumerates what
the Level Zero runtime leaves visible, so ``ZE_AFFINITY_MASK`` is already applied: its entries only name
the physical devices. torch counts no other process's memory, so ``process_memory`` knows none.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import ModuleType

from harness.errors import PlatformError
from harness.platform.base import Device, MemoryReading, Platform

MASK = "ZE_AFFINITY_MASK"


class XpuPlatform(Platform):
    """The XPU devices torch sees (``torch`` is the module, or a fake with its ``xpu`` namespace)."""

    name = "xpu"
    mask_variable = MASK
    torch_device = "xpu"
    display_name = "XPU"
    waits_for_release = True

    def __init__(self, torch: ModuleType, env: Mapping[str, str] = os.environ):
        self._xpu = torch.xpu
        entries = [entry.strip() for entry in env[MASK].split(",")] if env.get(MASK) else []
        try:
            self._devices = [
                _device(index, self._xpu.get_device_properties(index), entries)
                for index in range(self._xpu.device_count())
            ]
        except RuntimeError as error:  # what torch raises when the Level Zero driver refuses
            raise PlatformError(f"torch.xpu failed while listing devices: {error}") from None

    def devices(self) -> list[Device]:
        return list(self._devices)

    def memory(self) -> dict[int, MemoryReading]:
        readings = {}
        for device in self._devices:
            free, total = self._xpu.mem_get_info(device.index)
            readings[device.index] = MemoryReading(total - free, total)
        return readings

    def process_memory(self, pids: set[int]) -> dict[int, int]:
        return {}


def _device(index: int, properties, entries: list[str]) -> Device:
    # a mask entry is "<device>" or "<device>.<tile>"; its device number is the physical one
    entry = entries[index] if index < len(entries) else str(index)
    physical = int(entry.split(".")[0]) if entry.split(".")[0].isdigit() else index
    return Device(
        index=index,
        physical=physical,
        name=properties.name,
        uuid=uuid_text(getattr(properties, "uuid", None)) or f"XPU-{physical}",
        pci_bus_id="",  # torch does not say; nothing here matches XPU devices by bus
        total_bytes=int(properties.total_memory),
    )


def uuid_text(value) -> str | None:
    """torch gives a device UUID as 16 bytes (or a string in some builds): the usual 8-4-4-4-12 text."""
    if value is None:
        return None
    if isinstance(value, str):
        return value or None
    raw = bytes(value)
    if len(raw) != 16:
        return None
    hexed = raw.hex()
    return f"{hexed[:8]}-{hexed[8:12]}-{hexed[12:16]}-{hexed[16:20]}-{hexed[20:]}"
