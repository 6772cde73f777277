"""AMD GPUs through amdsmi: identity once, VRAM in bytes on every poll.

amdsmi has two memory calls: ``amdsmi_get_gpu_memory_usage/total(handle, VRAM)`` in bytes and
``amdsmi_get_gpu_vram_usage(handle)`` in MiB. vLLM once compared the MiB figure with a byte threshold
and its memory wait passed at once; here the MiB call is only a fallback for builds without the bytes
calls, and it is converted on the spot.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import ModuleType

from harness.errors import PlatformError
from harness.platform import masks
from harness.platform.base import MIB, Device, MemoryReading, Platform


class AmdPlatform(Platform):
    """The devices ``ROCR_VISIBLE_DEVICES`` then ``HIP_VISIBLE_DEVICES`` leave visible.

    ROCr filters first and HIP indexes into what is left, as the runtimes do; HIP reads
    ``CUDA_VISIBLE_DEVICES`` when ``HIP_VISIBLE_DEVICES`` is unset. ``amdsmi`` must be initialised
    (``detect`` does it once per process).
    """

    name = "rocm"
    mask_variable = "HIP_VISIBLE_DEVICES"
    torch_device = "cuda"
    display_name = "ROCm"
    waits_for_release = True
    extensible_kv_cache = True

    def __init__(self, amdsmi: ModuleType, env: Mapping[str, str] = os.environ):
        self._amdsmi = amdsmi
        try:
            found = sorted(
                (
                    (
                        masks.normalise_bus_id(amdsmi.amdsmi_get_gpu_device_bdf(handle)),
                        physical,
                        handle,
                        amdsmi.amdsmi_get_gpu_device_uuid(handle),
                    )
                    for physical, handle in enumerate(amdsmi.amdsmi_get_processor_handles())
                ),
                key=lambda device: device[0],
            )
            hip = next(
                (v for v in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if v in env),
                "HIP_VISIBLE_DEVICES",
            )
            for variable in ("ROCR_VISIBLE_DEVICES", hip):
                chosen = masks.visible(variable, env.get(variable), [d[3] for d in found])
                found = [found[position] for position in chosen]
            self._handles = [handle for _, _, handle, _ in found]
            self._devices = [
                Device(
                    index=index,
                    physical=physical,
                    name=amdsmi.amdsmi_get_gpu_asic_info(handle)["market_name"],
                    uuid=uuid,
                    pci_bus_id=bus,
                    total_bytes=self._vram(handle).total_bytes,
                )
                for index, (bus, physical, handle, uuid) in enumerate(found)
            ]
        except amdsmi.AmdSmiException as error:
            raise PlatformError(f"amdsmi failed while listing devices: {error}") from None

    def _vram(self, handle) -> MemoryReading:
        vram = self._amdsmi.AmdSmiMemoryType.VRAM
        try:
            return MemoryReading(
                self._amdsmi.amdsmi_get_gpu_memory_usage(handle, vram),
                self._amdsmi.amdsmi_get_gpu_memory_total(handle, vram),
            )
        except self._amdsmi.AmdSmiLibraryException:
            usage = self._amdsmi.amdsmi_get_gpu_vram_usage(handle)
            return MemoryReading(usage["vram_used"] * MIB, usage["vram_total"] * MIB)

    def devices(self) -> list[Device]:
        return list(self._devices)

    def memory(self) -> dict[int, MemoryReading]:
        try:
            return {index: self._vram(handle) for index, handle in enumerate(self._handles)}
        except self._amdsmi.AmdSmiException as error:
            raise PlatformError(f"amdsmi failed while reading device memory: {error}") from None

    def process_memory(self, pids: set[int]) -> dict[int, int]:
        """VRAM (bytes) of ``pids`` from ``amdsmi_get_gpu_process_list`` (ROCm 6.2+: one dict per process)."""
        try:
            listed = [self._amdsmi.amdsmi_get_gpu_process_list(handle) for handle in self._handles]
        except self._amdsmi.AmdSmiException as error:
            raise PlatformError(f"amdsmi failed while listing GPU processes: {error}") from None
        return {
            index: sum(p["memory_usage"]["vram_mem"] for p in processes if p["pid"] in pids)
            for index, processes in enumerate(listed)
        }
