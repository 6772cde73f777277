"""Fake ``amdsmi`` (ROCm's Python interface) over the devices in ``FAKE_GPUS``; see ``tests.fakes``.

Units as the real library: ``amdsmi_get_gpu_memory_total/usage(handle, AmdSmiMemoryType.VRAM)`` are
bytes, ``amdsmi_get_gpu_vram_usage(handle)`` is ``{"vram_total", "vram_used"}`` in MiB (whole MiB,
rounded down), BDFs are lower-case ``0000:1b:00.0``. Errors are ``AmdSmiLibraryException`` with
``err_code`` / ``err_info``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import IntEnum

from tests import fakes

AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NOT_INIT = 32
AMDSMI_STATUS_DRIVER_NOT_LOADED = 54

init_calls = 0
_initialised = False


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1 << 0
    INIT_AMD_GPUS = 1 << 1


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiException(Exception):
    """Base of every amdsmi error."""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int):
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = {
            AMDSMI_STATUS_INVAL: "AMDSMI_STATUS_INVAL - Invalid parameters",
            AMDSMI_STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
            AMDSMI_STATUS_NOT_INIT: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
            AMDSMI_STATUS_DRIVER_NOT_LOADED: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
        }.get(err_code, "unknown error")

    def __str__(self):
        return f"An error occurred with code: {self.err_code}({self.err_info})"


@dataclass(frozen=True)
class processor_handle:
    """A handle: the index in amdsmi's enumeration, looked up again on every call."""

    index: int


def _device(handle: processor_handle) -> dict:
    if not _initialised:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)
    gpus = fakes.devices()
    if not isinstance(handle, processor_handle) or not 0 <= handle.index < len(gpus):
        raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
    return gpus[handle.index]


def _vram(handle: processor_handle, mem_type: AmdSmiMemoryType) -> dict:
    gpu = _device(handle)
    if mem_type != AmdSmiMemoryType.VRAM or os.environ.get("FAKE_AMDSMI_BYTES_API") == "0":
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
    return gpu


def amdsmi_init(flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
    global init_calls, _initialised
    if not fakes.configured():
        raise AmdSmiLibraryException(AMDSMI_STATUS_DRIVER_NOT_LOADED)
    init_calls += 1
    _initialised = True


def amdsmi_shut_down() -> None:
    global _initialised
    _initialised = False


def amdsmi_get_processor_handles() -> list[processor_handle]:
    if not _initialised:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)
    return [processor_handle(index) for index in range(len(fakes.devices()))]


def amdsmi_get_gpu_device_uuid(handle: processor_handle) -> str:
    return _device(handle)["uuid"]


def amdsmi_get_gpu_device_bdf(handle: processor_handle) -> str:
    return _device(handle)["bus"].lower()


def amdsmi_get_gpu_asic_info(handle: processor_handle) -> dict:
    gpu = _device(handle)
    return {
        "market_name": gpu["name"],
        "vendor_id": "0x1002",
        "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
        "device_id": "0x74a1",
        "rev_id": "0x00",
        "asic_serial": "0x" + gpu["uuid"].replace("-", "")[-16:].upper(),
    }


def amdsmi_get_gpu_memory_total(handle: processor_handle, mem_type: AmdSmiMemoryType) -> int:
    return _vram(handle, mem_type)["total"]


def amdsmi_get_gpu_memory_usage(handle: processor_handle, mem_type: AmdSmiMemoryType) -> int:
    return _vram(handle, mem_type)["used"]


def amdsmi_get_gpu_vram_usage(handle: processor_handle) -> dict:
    gpu = _device(handle)
    return {"vram_total": gpu["total"] // 2**20, "vram_used": gpu["used"] // 2**20}


def amdsmi_get_gpu_process_list(handle: processor_handle) -> list[dict]:
    """ROCm 6.2+'s shape: one dict per process using the device, memory in bytes."""
    return [
        {
            "name": "python3",
            "pid": int(pid),
            "mem": used,
            "engine_usage": {"gfx": 0, "enc": 0},
            "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": used},
            "cu_occupancy": 0,
        }
        for pid, used in _device(handle).get("processes", {}).items()
    ]
