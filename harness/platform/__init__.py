"""Which platform this process runs on, and its backend.

``detect`` asks NVML, then amdsmi, then torch's XPU API (where an Intel GPU driver is bound), and falls
back to the host CPU, saying why in ``Detection.reason``.
``HARNESS_PLATFORM`` forces the answer (CI agents where detection is ambiguous, ``harness run``'s phases).
A process detects once, synchronously, and hands the platform down (``harness.tracking.context``);
``HARNESS_NVML_MODULE`` / ``HARNESS_AMDSMI_MODULE`` / ``HARNESS_XPU_MODULE`` name the module to import
in place of ``pynvml`` / ``amdsmi`` / ``torch``, which is how tests put fakes in, also in xdist workers
and pytester subprocesses.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Mapping
from types import ModuleType
from typing import NamedTuple

from harness.errors import PlatformError
from harness.platform.base import Device, MemoryReading, Platform
from harness.platform.facts import FACTS, GPU_PLATFORMS, PLATFORMS, VLLM_BACKENDS
from harness.platform.host import HostPlatform

__all__ = [
    "Detection",
    "Device",
    "MemoryReading",
    "Platform",
    "detect",
    "FACTS",
    "GPU_PLATFORMS",
    "PLATFORMS",
    "VLLM_BACKENDS",
]


class Detection(NamedTuple):
    platform: Platform
    reason: str


@functools.cache
def _initialised(module_name: str, init: str) -> ModuleType:
    """Import a management library and initialise it, once per process.

    Failures are not cached: ``functools.cache`` keeps only returned values.
    """
    module = importlib.import_module(module_name)
    getattr(module, init)()
    return module


def _answer(env: Mapping[str, str], variable: str, default: str, init: str, count: str):
    """(initialised library or None, its device count, what to say about it in one line)."""
    name = env.get(variable) or default
    try:
        module = _initialised(name, init)
        found = getattr(module, count)()
    except ImportError:
        return None, 0, f"{name} not installed"
    except Exception as error:  # NVMLError / AmdSmiException: their base classes live in the module
        return None, 0, f"{name}: {error}"
    return module, len(found) if isinstance(found, list) else found, name


def detect(env: Mapping[str, str] = os.environ) -> Detection:
    forced = env.get("HARNESS_PLATFORM", "")
    if forced and forced not in PLATFORMS:
        raise PlatformError(f"HARNESS_PLATFORM={forced!r}: expected one of {', '.join(PLATFORMS)}")
    if forced == "cpu":
        return Detection(HostPlatform(), "HARNESS_PLATFORM=cpu")

    why = []
    if forced in ("", "cuda"):
        nvml, count, said = _answer(env, "HARNESS_NVML_MODULE", "pynvml", "nvmlInit", "nvmlDeviceGetCount")
        if count:
            how = "HARNESS_PLATFORM=cuda" if forced else "NVML answered"
            driver = nvml.nvmlSystemGetDriverVersion()
            from harness.platform.nvidia import NvidiaPlatform  # each backend where its library answers

            return Detection(NvidiaPlatform(nvml, env), f"{how}: {count} GPU(s), driver {driver} ({said})")
        why.append(said if nvml is None else f"{said}: NVML reports no GPU")
        if forced:
            raise PlatformError(f"HARNESS_PLATFORM=cuda but NVML does not answer ({why[-1]})")

    if forced in ("", "rocm"):
        amdsmi, count, said = _answer(
            env, "HARNESS_AMDSMI_MODULE", "amdsmi", "amdsmi_init", "amdsmi_get_processor_handles"
        )
        if count:
            how = "HARNESS_PLATFORM=rocm" if forced else "amdsmi answered"
            from harness.platform.amd import AmdPlatform

            return Detection(AmdPlatform(amdsmi, env), f"{how}: {count} GPU(s) ({said})")
        why.append(said if amdsmi is None else f"{said}: amdsmi reports no GPU")
        if forced:
            raise PlatformError(f"HARNESS_PLATFORM=rocm but amdsmi does not answer ({why[-1]})")

    torch, count, said = _xpu(env, probe=not forced)
    if count:
        how = "HARNESS_PLATFORM=xpu" if forced else "torch.xpu answered"
        from harness.platform.intel import XpuPlatform

        return Detection(XpuPlatform(torch, env), f"{how}: {count} XPU(s) ({said})")
    why.append(said)
    if forced:
        raise PlatformError(f"HARNESS_PLATFORM=xpu but torch.xpu does not answer ({why[-1]})")
    return Detection(HostPlatform(), "no GPU: " + "; ".join(why))


def _xpu(env: Mapping[str, str], probe: bool):
    """(torch or None, its XPU count, what to say): torch is imported only where an Intel GPU's driver
    is loaded (or a stand-in is named), since importing it costs seconds on every CPU host."""
    name = env.get("HARNESS_XPU_MODULE") or "torch"
    if probe and name == "torch" and not _intel_gpu():
        return None, 0, "no Intel GPU driver (i915, xe) bound"
    try:
        torch = importlib.import_module(name)
        count = torch.xpu.device_count() if torch.xpu.is_available() else 0
    except ImportError:
        return None, 0, f"{name} not installed"
    except Exception as error:  # a driver that refuses: RuntimeError from torch's runtime
        return None, 0, f"{name}.xpu: {error}"
    return torch, count, f"{name}.xpu" if count else f"{name}.xpu reports no XPU"


def _intel_gpu(drm: str = "/sys/class/drm") -> bool:
    """A DRM device bound to Intel's GPU drivers (what Level Zero drives)."""
    try:
        cards = os.listdir(drm)
    except OSError:
        return False
    return any(
        os.path.basename(os.path.realpath(os.path.join(drm, card, "device", "driver"))) in ("i915", "xe")
        for card in cards
        if card.startswith("card")
    )
