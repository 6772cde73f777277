"""Mask and worker arithmetic: which mask entry pins each worker, what a pinned worker sets, and what
``-n auto`` resolves to. Pure functions of a platform and the environment, so ``harness run`` and the
pytest plugin agree without one importing the other.

An outer mask is respected: each worker gets the outer mask's own entry (``CUDA_VISIBLE_DEVICES=3,5`` →
``3`` and ``5``; UUIDs stay UUIDs). On ROCm, ``HIP_VISIBLE_DEVICES`` indexes into what
``ROCR_VISIBLE_DEVICES`` leaves, so an outer ROCR mask stays as it is and still agrees, and
``CUDA_VISIBLE_DEVICES`` gets the same value because vLLM raises when it differs from HIP's. On Intel
GPUs ``ZE_AFFINITY_MASK`` (Level Zero's) pins a worker.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple, Protocol

from harness.platform.base import Platform


class Slot(NamedTuple):
    """One worker's share: the mask entry that selects its device, and that device's UUID."""

    mask: str
    uuid: str


class WorkerCounts(Protocol):
    """The settings ``-n auto`` reads (``harness.config.settings.Settings`` has them)."""

    @property
    def cpu_workers(self) -> int: ...

    @property
    def workers_per_gpu(self) -> int: ...


def outer_mask(platform: Platform, env: Mapping[str, str] = os.environ) -> tuple[str, str | None]:
    """(variable, value) of the mask the runtime indexes visible devices by; HIP falls back to CUDA's."""
    variable = platform.mask_variable or "CUDA_VISIBLE_DEVICES"
    if platform.name == "rocm" and variable not in env:
        return "CUDA_VISIBLE_DEVICES", env.get("CUDA_VISIBLE_DEVICES")
    return variable, env.get(variable)


def slots(platform: Platform, env: Mapping[str, str] = os.environ) -> list[Slot]:
    """One slot per visible device, in visible order; the outer mask's own entries when there is one."""
    devices = platform.devices()
    _, value = outer_mask(platform, env)
    entries = [entry.strip() for entry in value.split(",")] if value else [str(d.index) for d in devices]
    return [Slot(entry, device.uuid) for entry, device in zip(entries, devices, strict=False)]


def worker_slots(platform: Platform, per_gpu: int, env: Mapping[str, str] = os.environ) -> list[Slot]:
    """The slots workers are dealt from, each device repeated ``per_gpu`` times (device-major); none on a
    platform without a mask (the CPU)."""
    if platform.mask_variable is None:
        return []
    return [slot for slot in slots(platform, env) for _ in range(per_gpu)]


def mask_variables(platform: Platform, mask: str) -> dict[str, str]:
    """What a worker pinned to ``mask`` sets: its platform's mask; HIP and CUDA agree on ROCm (vLLM checks
    that they do)."""
    if platform.name == "rocm":
        return {"HIP_VISIBLE_DEVICES": mask, "CUDA_VISIBLE_DEVICES": mask}
    return {platform.mask_variable or "CUDA_VISIBLE_DEVICES": mask}


def auto_workers(
    platform: Platform, settings: WorkerCounts, env: Mapping[str, str] = os.environ
) -> int | None:
    """What ``-n auto`` resolves to: one worker per visible GPU (× ``workers_per_gpu``), ``cpu_workers``
    on the CPU; None when the user's ``PYTEST_XDIST_AUTO_NUM_WORKERS`` decides (xdist's own hook reads it)."""
    if env.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    if platform.mask_variable is None:
        return settings.cpu_workers
    return len(worker_slots(platform, settings.workers_per_gpu, env))
