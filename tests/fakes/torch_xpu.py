"""A fake ``torch`` whose ``torch.xpu`` answers as torch's XPU API does over the fake machine of
``tests.fakes`` (``FAKE_GPUS`` / ``FAKE_GPUS_FILE``): ``is_available``, ``device_count``,
``get_device_properties`` (``name``, ``total_memory`` in bytes, ``uuid`` as 16 bytes) and ``mem_get_info``
(free and total bytes of the whole device, every process's use counted).

Like the Level Zero runtime under torch, it applies ``ZE_AFFINITY_MASK`` itself: only the listed devices
are enumerated, in the mask's order (an entry ``<device>.<tile>`` selects its device). Select it with
``HARNESS_XPU_MODULE=tests.fakes.torch_xpu``.
"""

from __future__ import annotations

import os
import types

from tests import fakes


def _visible() -> list[dict]:
    devices = fakes.devices() if fakes.configured() else []
    mask = os.environ.get("ZE_AFFINITY_MASK")
    if not mask:
        return devices
    return [devices[int(entry.split(".")[0])] for entry in mask.split(",")]


def _device(index) -> dict:
    number = index if isinstance(index, int) else int(str(index).rpartition(":")[2] or 0)
    found = _visible()
    if not 0 <= number < len(found):
        raise RuntimeError(f"Invalid device index {number}: {len(found)} XPU device(s)")  # as torch says
    return found[number]


def _properties(index) -> types.SimpleNamespace:
    device = _device(index)
    raw = bytes.fromhex(device["uuid"].removeprefix("GPU-").replace("-", ""))
    return types.SimpleNamespace(name=device["name"], total_memory=device["total"], uuid=list(raw))


xpu = types.SimpleNamespace(
    is_available=lambda: bool(_visible()),
    device_count=lambda: len(_visible()),
    get_device_properties=_properties,
    mem_get_info=lambda device=None: (
        _device(device or 0)["total"] - _device(device or 0)["used"],
        _device(device or 0)["total"],
    ),
)
