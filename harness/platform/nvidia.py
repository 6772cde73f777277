"""NVIDIA GPUs through nvidia-ml-py (``pynvml``): identity once, memory in bytes on every poll."""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import ModuleType

from harness.errors import PlatformError
from harness.platform import masks
from harness.platform.base import Device, MemoryReading, Platform


class NvidiaPlatform(Platform):
    """The devices ``CUDA_VISIBLE_DEVICES`` leaves visible, read through an initialised NVML module.

    ``nvml`` is ``pynvml`` or anything with its names (the tests' fake); ``detect`` initialises it once
    per process. The mask is resolved here, at construction, so a bad mask fails before any test runs.
    """

    name = "cuda"
    mask_variable = "CUDA_VISIBLE_DEVICES"
    torch_device = "cuda"
    display_name = "CUDA"
    extensible_kv_cache = True

    def __init__(self, nvml: ModuleType, env: Mapping[str, str] = os.environ):
        self._nvml = nvml
        self._pid = os.getpid()  # the process NVML was initialized in
        try:
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
            found = [
                (
                    physical,
                    handle,
                    nvml.nvmlDeviceGetUUID(handle),
                    masks.normalise_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId),
                )
                for physical, handle in enumerate(handles)
            ]
            by_bus = sorted(found, key=lambda device: device[3])
            chosen = masks.visible(self.mask_variable, env.get(self.mask_variable), [d[2] for d in by_bus])
            self._handles = [by_bus[position][1] for position in chosen]
            self._devices = [
                Device(
                    index=index,
                    physical=by_bus[position][0],
                    name=nvml.nvmlDeviceGetName(by_bus[position][1]),
                    uuid=by_bus[position][2],
                    pci_bus_id=by_bus[position][3],
                    total_bytes=nvml.nvmlDeviceGetMemoryInfo(by_bus[position][1]).total,
                )
                for index, position in enumerate(chosen)
            ]
        except nvml.NVMLError as error:
            raise PlatformError(f"NVML failed while listing devices: {error}") from None

    def devices(self) -> list[Device]:
        return list(self._devices)

    def memory(self) -> dict[int, MemoryReading]:
        try:
            infos = self._each(self._nvml.nvmlDeviceGetMemoryInfo)
        except self._nvml.NVMLError as error:
            raise PlatformError(f"NVML failed while reading device memory: {error}") from None
        return {index: MemoryReading(info.used, info.total) for index, info in enumerate(infos)}

    def process_memory(self, pids: set[int]) -> dict[int, int]:
        """``usedGpuMemory`` (bytes; None where NVML cannot tell, as under MIG) summed over ``pids``."""
        try:
            listed = self._each(self._nvml.nvmlDeviceGetComputeRunningProcesses)
        except self._nvml.NVMLError as error:
            raise PlatformError(f"NVML failed while listing GPU processes: {error}") from None
        return {
            index: sum(p.usedGpuMemory or 0 for p in processes if p.pid in pids)
            for index, processes in enumerate(listed)
        }

    def _each(self, call) -> list:
        """``call`` on each visible device. In a child forked from the process that initialized NVML, NVML
        is uninitialized (a test forking its body, as vLLM's ``fork_new_process_for_each_test`` does):
        initialized again there and the same devices found by UUID, once per process."""
        try:
            return [call(handle) for handle in self._handles]
        except getattr(self._nvml, "NVMLError_Uninitialized", ()):
            if self._pid == os.getpid():
                raise
            self._nvml.nvmlInit()
            self._pid = os.getpid()
            self._handles = [self._nvml.nvmlDeviceGetHandleByUUID(device.uuid) for device in self._devices]
            return [call(handle) for handle in self._handles]
