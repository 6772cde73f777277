"""Fake nvidia-ml-py (``pynvml``) over the devices in ``FAKE_GPUS``; see ``tests.fakes``.

Same names and shapes as the real module: functions raise ``NVMLError(code)``, which becomes the
code's subclass (``NVMLError_NotFound`` ...) with ``.value`` and NVML's message, memory is in bytes,
UUIDs are ``GPU-...`` strings and PCI bus ids use NVML's ``%08X:%02X:%02X.0`` form.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests import fakes

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_UNKNOWN = 999

init_calls = 0  # how often nvmlInit ran: lets tests check the library is initialised once per process
_references = 0  # NVML counts nvmlInit/nvmlShutdown pairs


class NVMLError(Exception):
    _valClassMapping: dict[int, type] = {}
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(cls, value):
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __str__(self):
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other):
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self):
        return hash(self.value)


def _error_class(name: str, value: int) -> type:
    cls = type(
        f"NVMLError_{name}", (NVMLError,), {"__new__": lambda typ, *args: NVMLError.__new__(typ, value)}
    )
    NVMLError._valClassMapping[value] = cls
    return cls


NVMLError_Uninitialized = _error_class("Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotFound = _error_class("NotFound", NVML_ERROR_NOT_FOUND)
NVMLError_DriverNotLoaded = _error_class("DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibraryNotFound = _error_class("LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_Unknown = _error_class("Unknown", NVML_ERROR_UNKNOWN)


@dataclass(frozen=True)
class c_nvmlDevice_t:
    """A handle: the index in NVML's enumeration, looked up again on every call."""

    index: int


@dataclass(frozen=True)
class c_nvmlMemory_t:
    total: int
    free: int
    used: int


@dataclass(frozen=True)
class nvmlPciInfo_t:
    busId: str
    busIdLegacy: str
    domain: int
    bus: int
    device: int


def _require_init() -> None:
    if _references <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


def _device(handle: c_nvmlDevice_t) -> dict:
    _require_init()
    gpus = fakes.devices()
    if not isinstance(handle, c_nvmlDevice_t) or not 0 <= handle.index < len(gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return gpus[handle.index]


def nvmlInit() -> None:
    global init_calls, _references
    if not fakes.configured():
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    init_calls += 1
    _references += 1


def nvmlShutdown() -> None:
    global _references
    _require_init()
    _references -= 1


def nvmlSystemGetDriverVersion() -> str:
    _require_init()
    return "580.159.04"


def nvmlDeviceGetCount() -> int:
    _require_init()
    return len(fakes.devices())


def nvmlDeviceGetHandleByIndex(index: int) -> c_nvmlDevice_t:
    handle = c_nvmlDevice_t(index)
    _device(handle)
    return handle


def nvmlDeviceGetHandleByUUID(uuid: str) -> c_nvmlDevice_t:
    _require_init()
    for index, gpu in enumerate(fakes.devices()):
        if gpu["uuid"] == uuid:
            return c_nvmlDevice_t(index)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetUUID(handle: c_nvmlDevice_t) -> str:
    return _device(handle)["uuid"]


def nvmlDeviceGetName(handle: c_nvmlDevice_t) -> str:
    return _device(handle)["name"]


def nvmlDeviceGetPciInfo(handle: c_nvmlDevice_t) -> nvmlPciInfo_t:
    domain, bus, rest = _device(handle)["bus"].split(":")
    domain, bus, device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    return nvmlPciInfo_t(
        busId=f"{domain:08X}:{bus:02X}:{device:02X}.0",
        busIdLegacy=f"{domain:04X}:{bus:02X}:{device:02X}.0",
        domain=domain,
        bus=bus,
        device=device,
    )


def nvmlDeviceGetMemoryInfo(handle: c_nvmlDevice_t, version=None) -> c_nvmlMemory_t:
    gpu = _device(handle)
    return c_nvmlMemory_t(total=gpu["total"], free=gpu["total"] - gpu["used"], used=gpu["used"])


@dataclass
class c_nvmlProcessInfo_t:
    """What nvidia-ml-py hands back per process (its friendly object of ``c_nvmlProcessInfo_v3_t``)."""

    pid: int
    usedGpuMemory: int | None  # bytes; None where NVML cannot tell (MIG, Windows WDDM)
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


def nvmlDeviceGetComputeRunningProcesses(handle: c_nvmlDevice_t) -> list[c_nvmlProcessInfo_t]:
    return [c_nvmlProcessInfo_t(int(pid), used) for pid, used in _device(handle).get("processes", {}).items()]
